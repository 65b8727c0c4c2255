"""The fields of Kubeflow's kubeflow.org/v1 TFJob and PyTorchJob that examples/k8s may use, as
the training operator publishes them (manifests/base/crds/kubeflow.org_{tfjobs,pytorchjobs}.yaml
and its webhook's rules in pkg/apis/kubeflow.org/v1/*_validation.go), with the Kubernetes core
v1 pod fields they embed; `problems(manifest)` lists what a manifest gets wrong."""

from __future__ import annotations

from typing import Any

__all__ = ["JOBS", "problems"]


class Obj:
    """An object with these fields (a field's schema, or None for a value not looked into)."""

    def __init__(self, fields: dict[str, Any], required: tuple[str, ...] = ()):
        self.fields, self.required = fields, required


class ListOf:
    def __init__(self, item: Any):
        self.item = item


class MapOf:
    """Free keys (labels, replica types), each value checked against `value`."""

    def __init__(self, value: Any):
        self.value = value


def _plain(names: str) -> dict[str, None]:
    """Fields whose values are not looked into, from a space-separated list."""
    return dict.fromkeys(names.split())


STRING_MAP = MapOf(None)
OBJECT_META = Obj(
    _plain("name namespace generateName finalizers")
    | {"labels": STRING_MAP, "annotations": STRING_MAP}
)
KEY_REF = Obj(_plain("name key optional"), required=("key",))
ENV_VAR = Obj(
    {
        "name": None,
        "value": None,
        "valueFrom": Obj(
            {
                "secretKeyRef": KEY_REF,
                "configMapKeyRef": KEY_REF,
                "fieldRef": None,
                "resourceFieldRef": None,
            }
        ),
    },
    required=("name",),
)
CONTAINER_PORT = Obj(
    _plain("containerPort hostIP hostPort name protocol"),
    required=("containerPort",),
)
RESOURCES = Obj({"limits": STRING_MAP, "requests": STRING_MAP, "claims": None})
VOLUME_MOUNT = Obj(
    _plain("name mountPath readOnly recursiveReadOnly subPath subPathExpr mountPropagation"),
    required=("name", "mountPath"),
)
CONTAINER = Obj(
    {
        "args": ListOf(None),
        "command": ListOf(None),
        "env": ListOf(ENV_VAR),
        "envFrom": None,
        "image": None,
        "imagePullPolicy": None,
        "lifecycle": None,
        "livenessProbe": None,
        "name": None,
        "ports": ListOf(CONTAINER_PORT),
        "readinessProbe": None,
        "resizePolicy": None,
        "resources": RESOURCES,
        "restartPolicy": None,
        "securityContext": None,
        "startupProbe": None,
        "stdin": None,
        "stdinOnce": None,
        "terminationMessagePath": None,
        "terminationMessagePolicy": None,
        "tty": None,
        "volumeDevices": None,
        "volumeMounts": ListOf(VOLUME_MOUNT),
        "workingDir": None,
    },
    required=("name",),
)
POD_SPEC = Obj(
    _plain(
        "activeDeadlineSeconds affinity automountServiceAccountToken dnsConfig dnsPolicy "
        "enableServiceLinks ephemeralContainers hostAliases hostIPC hostNetwork hostPID "
        "hostUsers hostname imagePullSecrets nodeName nodeSelector os overhead "
        "preemptionPolicy priority priorityClassName readinessGates resourceClaims "
        "restartPolicy runtimeClassName schedulerName schedulingGates securityContext "
        "serviceAccount serviceAccountName setHostnameAsFQDN shareProcessNamespace subdomain "
        "terminationGracePeriodSeconds tolerations topologySpreadConstraints volumes"
    )
    | {"containers": ListOf(CONTAINER), "initContainers": ListOf(CONTAINER)},
    required=("containers",),
)
REPLICA_SPEC = Obj(
    {
        "replicas": None,
        "restartPolicy": None,
        "template": Obj({"metadata": OBJECT_META, "spec": POD_SPEC}, required=("spec",)),
    },
    required=("template",),
)
RUN_POLICY = Obj(
    _plain(
        "activeDeadlineSeconds backoffLimit cleanPodPolicy managedBy schedulingPolicy suspend "
        "ttlSecondsAfterFinished"
    )
)
ELASTIC_POLICY = Obj(
    _plain(
        "minReplicas maxReplicas rdzvBackend rdzvPort rdzvHost rdzvId rdzvConf standalone "
        "nProcPerNode maxRestarts metrics"
    )
)


def _job(spec_fields: dict[str, Any], replicas_field: str) -> Obj:
    spec = Obj(spec_fields | {replicas_field: MapOf(REPLICA_SPEC)}, required=(replicas_field,))
    return Obj(
        {"apiVersion": None, "kind": None, "metadata": OBJECT_META, "spec": spec},
        required=("apiVersion", "kind", "metadata", "spec"),
    )


# kind -> (schema, replicas field, replica types, default container, its port name and port)
JOBS = {
    "TFJob": (
        _job(
            {"runPolicy": RUN_POLICY, "successPolicy": None, "enableDynamicWorker": None},
            "tfReplicaSpecs",
        ),
        "tfReplicaSpecs",
        ("Chief", "Master", "Worker", "PS", "Evaluator"),
        "tensorflow",
        "tfjob-port",
        2222,
    ),
    "PyTorchJob": (
        _job(
            {"runPolicy": RUN_POLICY, "elasticPolicy": ELASTIC_POLICY, "nprocPerNode": None},
            "pytorchReplicaSpecs",
        ),
        "pytorchReplicaSpecs",
        ("Master", "Worker"),
        "pytorch",
        "pytorchjob-port",
        23456,
    ),
}
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("All", "Running", "None")


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(value: Any, schema: Any, path: str, out: list[str]) -> None:
    if schema is None:
        return
    if isinstance(schema, ListOf):
        if not isinstance(value, list):
            out.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            _walk(item, schema.item, f"{path}[{i}]", out)
        return
    if not isinstance(value, dict):
        out.append(f"{path}: expected an object")
        return
    if isinstance(schema, MapOf):
        for key, item in value.items():
            _walk(item, schema.value, _at(path, key), out)
        return
    where = path or "the manifest"
    out.extend(f"{where}: unknown field {key!r}" for key in value if key not in schema.fields)
    out.extend(f"{where}: missing {key!r}" for key in schema.required if key not in value)
    for key, item in value.items():
        if key in schema.fields:
            _walk(item, schema.fields[key], _at(path, key), out)


def _operator_rules(manifest: dict, out: list[str]) -> None:
    """What the operator's webhook and controller need beyond the schema."""
    kind = manifest["kind"]
    _, field, types, container_name, port_name, _ = JOBS[kind]
    spec = manifest["spec"]
    for rtype, replica in spec[field].items():
        where = f"spec.{field}.{rtype}"
        if rtype not in types:
            out.append(f"{where}: {kind} replica types are {', '.join(types)}")
        if replica.get("restartPolicy", "Never") not in RESTART_POLICIES:
            out.append(f"{where}.restartPolicy: one of {', '.join(RESTART_POLICIES)}")
        if not isinstance(replica.get("replicas", 1), int) or replica.get("replicas", 1) < 0:
            out.append(f"{where}.replicas: a count")
        containers = replica["template"]["spec"]["containers"]
        if any(not c.get("image") for c in containers):
            out.append(f"{where}: every container needs an image")
        named = [c for c in containers if c.get("name") == container_name]
        if not named:
            out.append(f"{where}: no container named {container_name!r}")
        elif not any(p.get("name") == port_name for p in named[0].get("ports", [])):
            out.append(f"{where}: container {container_name!r} has no port named {port_name!r}")
    chiefs = [t for t in ("Chief", "Master") if t in spec[field]]
    if kind == "TFJob" and len(chiefs) > 1:
        out.append("TFJob: more than one of Chief and Master")
    if kind == "PyTorchJob" and spec[field].get("Master", {}).get("replicas", 1) != 1:
        out.append("PyTorchJob: there must be exactly 1 Master replica")
    policy = spec.get("runPolicy", {}).get("cleanPodPolicy", "None")
    if policy not in CLEAN_POD_POLICIES:
        out.append(f"spec.runPolicy.cleanPodPolicy: one of {', '.join(CLEAN_POD_POLICIES)}")


def problems(manifest: Any) -> list[str]:
    """Everything wrong with `manifest` for the training operator; [] when nothing is."""
    if not isinstance(manifest, dict) or manifest.get("kind") not in JOBS:
        return [f"kind: expected one of {', '.join(JOBS)}"]
    if manifest.get("apiVersion") != "kubeflow.org/v1":
        return ["apiVersion: expected kubeflow.org/v1"]
    out: list[str] = []
    _walk(manifest, JOBS[manifest["kind"]][0], "", out)
    if not out:
        _operator_rules(manifest, out)
    return out
