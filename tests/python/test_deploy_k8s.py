"""examples/k8s: the TFJob and PyTorchJob manifests checked against the training operator's
published fields, then run as the operator would run them: one network namespace per pod with
the pod's name as hostname and every Service name in /etc/hosts, each pod's container command
(read from the manifest) with exactly the environment the operator sets for its role."""

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from k8s_schema import JOBS, problems
from netns_helpers import named_hosts

import pscore
from pscore.train import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "examples" / "k8s"
RUN_TIMEOUT_S = 240  # a hang guard: the jobs take ~10-30 s here


def load(name: str) -> dict:
    return yaml.safe_load((MANIFESTS / name).read_text())


# ----------------------------------------------------------------------------- structure


@pytest.mark.parametrize("name", ["tfjob.yaml", "pytorchjob.yaml"])
def test_manifest_has_only_the_operators_fields(name):
    assert problems(load(name)) == []


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda m: m["spec"].update(cleanupPolicy="All"), "spec: unknown field 'cleanupPolicy'"),
        (lambda m: m["spec"]["tfReplicaSpecs"]["Chief"].update(replica=1), "unknown field"),
        (lambda m: m["spec"]["tfReplicaSpecs"].update(Server=_replica(m)), "replica types are"),
        (lambda m: _container(m, "Worker").pop("image"), "every container needs an image"),
        (lambda m: _container(m, "PS").update(name="tf"), "no container named 'tensorflow'"),
        (lambda m: _container(m, "PS").update(cmd=[]), "unknown field 'cmd'"),
        (lambda m: m["spec"].pop("tfReplicaSpecs"), "spec: missing 'tfReplicaSpecs'"),
    ],
)
def test_the_check_finds_what_the_operator_refuses(edit, expected):
    manifest = json.loads(json.dumps(load("tfjob.yaml")))  # unshares the YAML anchors' template
    edit(manifest)
    assert any(expected in p for p in problems(manifest)), problems(manifest)


def _replica(manifest: dict) -> dict:
    return json.loads(json.dumps(manifest["spec"]["tfReplicaSpecs"]["Worker"]))


def _container(manifest: dict, rtype: str) -> dict:
    return manifest["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]


def default_container(manifest: dict, rtype: str) -> dict:
    _, field, _, name, _, _ = JOBS[manifest["kind"]]
    containers = manifest["spec"][field][rtype]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


@pytest.mark.parametrize("name", ["tfjob.yaml", "pytorchjob.yaml"])
def test_every_pod_runs_the_example_that_exists(name):
    manifest = load(name)
    field = JOBS[manifest["kind"]][1]
    for rtype in manifest["spec"][field]:
        argv = default_container(manifest, rtype)["command"]
        assert argv[0] in ("python", "torchrun")
        script = ROOT / argv[1]
        assert script.is_file(), argv
        strategy = argv[argv.index("--strategy") + 1]
        assert strategy in STRATEGIES
        assert (strategy == "allreduce") == (manifest["kind"] == "PyTorchJob")


# ----------------------------------------------------------------------------- the operator


def replicas(manifest: dict) -> list[tuple[str, int]]:
    """(replica type, index) of every pod, in the manifest's order."""
    field = JOBS[manifest["kind"]][1]
    specs = manifest["spec"][field]
    return [(rtype, i) for rtype, spec in specs.items() for i in range(spec.get("replicas", 1))]


def port(manifest: dict, rtype: str) -> int:
    _, _, _, _, port_name, default = JOBS[manifest["kind"]]
    ports = default_container(manifest, rtype).get("ports", [])
    return next((p["containerPort"] for p in ports if p.get("name") == port_name), default)


def pod_name(manifest: dict, rtype: str, index: int) -> str:
    return f"{manifest['metadata']['name']}-{rtype.lower()}-{index}"


def service_names(manifest: dict) -> dict[str, list[str]]:
    """Every pod's hostname and the DNS names of its headless Service."""
    namespace = manifest["metadata"].get("namespace", "default")
    names = {}
    for rtype, i in replicas(manifest):
        pod = pod_name(manifest, rtype, i)
        names[pod] = [f"{pod}.{namespace}.svc", f"{pod}.{namespace}.svc.cluster.local"]
    return names


def tf_config(manifest: dict, rtype: str, index: int) -> str:
    """TF_CONFIG as the operator writes it (pkg/controller.v1/tensorflow/tensorflow.go)."""
    namespace = manifest["metadata"].get("namespace", "default")
    cluster: dict[str, list[str]] = {}
    for t, i in replicas(manifest):
        address = f"{pod_name(manifest, t, i)}.{namespace}.svc:{port(manifest, t)}"
        cluster.setdefault(t.lower(), []).append(address)
    task = {"type": rtype.lower(), "index": index}
    return json.dumps({"cluster": cluster, "task": task, "environment": "cloud"})


def pytorch_env(manifest: dict, rtype: str, index: int) -> dict[str, str]:
    """What the operator sets in a PyTorchJob pod (pkg/controller.v1/pytorch: envvar.go,
    master.go): the master's Service and port, the world over nprocPerNode ranks per pod, and
    torchrun's PET_* variables."""
    pods = len(replicas(manifest))
    nproc = manifest["spec"].get("nprocPerNode", "auto")
    rank = index + 1 if rtype == "Worker" else index
    master = pod_name(manifest, "Master", 0)
    master_port = str(port(manifest, "Master"))
    return {
        "PYTHONUNBUFFERED": "0",
        "MASTER_ADDR": master,
        "MASTER_PORT": master_port,
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": master_port,
        "WORLD_SIZE": str(pods * int(nproc)),
        "RANK": str(rank),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": str(rank),
        "PET_NNODES": str(pods),
    }


def container_env(container: dict, secrets_by_name: dict) -> dict[str, str]:
    """The container's own env, as the kubelet resolves it (values and Secret keys)."""
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secrets_by_name[ref["name"]][ref["key"]]
    return env


def run_job(manifest: dict, operator_env) -> dict[tuple[str, int], tuple[int, str]]:
    """Every pod of the job at once; (exit status, output) by (replica type, index)."""
    base = {
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
        "PYTHONPATH": os.path.dirname(os.path.dirname(pscore.__file__)),
        "HOME": os.environ.get("HOME", "/root"),
        "OMP_NUM_THREADS": "1",
    }
    stored = {"pscore-auth": {"token": secrets.token_hex(32)}}  # kubectl create secret ...
    procs = {}
    with named_hosts(service_names(manifest)) as hosts:
        try:
            for rtype, i in replicas(manifest):
                container = default_container(manifest, rtype)
                env = base | container_env(container, stored) | operator_env(manifest, rtype, i)
                argv = hosts[pod_name(manifest, rtype, i)].command(*container["command"])
                procs[rtype, i] = subprocess.Popen(
                    argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    text=True, start_new_session=True,
                )  # fmt: skip
            outputs = {pod: p.communicate(timeout=RUN_TIMEOUT_S)[0] for pod, p in procs.items()}
            return {pod: (procs[pod].returncode, out) for pod, out in outputs.items()}
        finally:  # a pod's processes (torchrun's ranks too) share its process group
            for p in procs.values():
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


def test_tfjob_runs_to_the_end_with_tf_config():
    manifest = load("tfjob.yaml")
    results = run_job(manifest, lambda m, t, i: {"TF_CONFIG": tf_config(m, t, i)})
    report = "\n".join(f"== {pod}: exit {rc}\n{out}" for pod, (rc, out) in results.items())
    assert all(rc == 0 for rc, _ in results.values()), report
    assert "strategy ps-sync:" in results["Chief", 0][1], report
    assert "test accuracy" in results["Chief", 0][1], report
    assert "pscore: ps task (shard 0) serving on" in results["PS", 0][1], report


def test_pytorchjob_runs_to_the_end_under_torchrun():
    manifest = load("pytorchjob.yaml")
    results = run_job(manifest, pytorch_env)
    report = "\n".join(f"== {pod}: exit {rc}\n{out}" for pod, (rc, out) in results.items())
    assert all(rc == 0 for rc, _ in results.values()), report
    assert "strategy allreduce:" in results["Master", 0][1], report
    assert "test accuracy" in results["Master", 0][1], report
