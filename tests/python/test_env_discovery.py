"""discover() for every source (pscore-run, torchrun, TF_CONFIG, Slurm, Open MPI), Slurm's
nodelist syntax and ClusterSpec."""

from __future__ import annotations

import json

import pytest

from pscore.cluster import ClusterSpec, discover, expand_nodelist
from pscore.cluster.slurm import expand_tasks_per_node


def test_nothing_set_is_a_world_of_one():
    env = discover({"HOME": "/root"})
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (0, 1, 0, 1)
    assert (env.master_addr, env.master_port, env.source) == ("127.0.0.1", 0, "default")


# ----------------------------------------------------------------------------- pscore / torchrun

PSCORE = {
    "PSCORE_RANK": "3",
    "PSCORE_WORLD_SIZE": "4",
    "PSCORE_LOCAL_RANK": "1",
    "PSCORE_LOCAL_WORLD_SIZE": "2",
    "PSCORE_MASTER_ADDR": "10.0.0.1",
    "PSCORE_MASTER_PORT": "29400",
}
TORCHRUN = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "MASTER_ADDR": "master.example",
    "MASTER_PORT": "29500",
}


def test_pscore_variables():
    env = discover(PSCORE)
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 4, 1, 2)
    assert (env.master_addr, env.master_port, env.source) == ("10.0.0.1", 29400, "pscore")


def test_pscore_wins_over_every_other_source():
    everything = {**TORCHRUN, **PSCORE, "TF_CONFIG": "{}", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    assert discover(everything).source == "pscore"


def test_pscore_falls_back_to_torchrun_master_and_local_variables():
    env = discover(
        {
            "PSCORE_RANK": "1",
            "PSCORE_WORLD_SIZE": "2",
            "MASTER_ADDR": "h",
            "MASTER_PORT": "7",
            "LOCAL_RANK": "1",
        }
    )
    assert (env.master_addr, env.master_port, env.local_rank, env.local_world_size) == (
        "h",
        7,
        1,
        2,
    )


def test_torchrun_variables():
    env = discover(TORCHRUN)
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (5, 8, 1, 4)
    assert (env.master_addr, env.master_port, env.source) == ("master.example", 29500, "torchrun")


def test_torchrun_without_local_variables_assumes_one_node():
    env = discover({"RANK": "2", "WORLD_SIZE": "3", "MASTER_ADDR": "a", "MASTER_PORT": "1"})
    assert (env.local_rank, env.local_world_size) == (2, 3)


def test_world_of_one_needs_no_master():
    env = discover({"RANK": "0", "WORLD_SIZE": "1"})
    assert (env.master_addr, env.master_port) == ("127.0.0.1", 0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"RANK": "8"}, "RANK=8 is out of range for WORLD_SIZE=8"),
        ({"RANK": "-1"}, "RANK=-1 is out of range"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be >= 1"),
        ({"RANK": "two"}, "RANK='two' is not an integer"),
        ({"WORLD_SIZE": None}, "WORLD_SIZE is not set"),
        ({"MASTER_ADDR": None}, "MASTER_ADDR must be set when the world has 8 ranks"),
        ({"MASTER_PORT": None}, "MASTER_PORT must be set"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a port number"),
        ({"LOCAL_RANK": "4"}, "LOCAL_RANK=4 is out of range for LOCAL_WORLD_SIZE=4"),
    ],
)
def test_malformed_torchrun_environment(changes, message):
    env = dict(TORCHRUN)
    for k, v in changes.items():
        if v is None:
            env.pop(k)
        else:
            env[k] = v
    with pytest.raises(ValueError, match=message):
        discover(env)


def test_malformed_pscore_environment_names_the_variable():
    with pytest.raises(ValueError, match="PSCORE_RANK=4 is out of range for PSCORE_WORLD_SIZE=4"):
        discover({**PSCORE, "PSCORE_RANK": "4"})


# ----------------------------------------------------------------------------- TF_CONFIG

CLUSTER = {
    "chief": ["c0:2222"],
    "worker": ["w0:2222", "w1:2222", "c0:2223"],
    "ps": ["p0:2222", "p1:2222"],
}


def tf(task_type, index, cluster=CLUSTER):
    return {
        "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})
    }


@pytest.mark.parametrize(
    ("task", "rank", "local"),
    [(("chief", 0), 0, (0, 2)), (("worker", 0), 1, (0, 1)), (("worker", 2), 3, (1, 2))],
)
def test_tf_config_collective_ranks_put_the_chief_first(task, rank, local):
    env = discover(tf(*task))
    assert (env.rank, env.world_size, env.source) == (rank, 4, "tf_config")
    assert (env.local_rank, env.local_world_size) == local  # c0 runs the chief and worker 2
    assert (env.master_addr, env.master_port) == ("c0", 2222)
    assert (env.role, env.task_index) == task
    assert env.cluster_spec == ClusterSpec(CLUSTER)


def test_tf_config_ps_tasks_are_outside_the_collective_world():
    env = discover(tf("ps", 1))
    assert (env.rank, env.world_size, env.role, env.task_index) == (-1, 4, "ps", 1)
    assert not env.is_collective_member
    assert env.cluster_spec.task_address("ps", 1) == "p1:2222"


def test_tf_config_without_chief_makes_worker_zero_the_master():
    env = discover(tf("worker", 1, {"worker": ["a:1", "b:2"], "ps": ["p:3"]}))
    assert (env.rank, env.world_size, env.master_addr, env.master_port) == (1, 2, "a", 1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "TF_CONFIG is not valid JSON"),
        ("[1, 2]", "TF_CONFIG must be a JSON object"),
        (json.dumps({"task": {"type": "worker"}}), "TF_CONFIG has no 'cluster'"),
        (json.dumps({"cluster": CLUSTER}), "TF_CONFIG has no 'task'"),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 7}}),
            "worker:7 is not",
        ),
        (json.dumps({"cluster": {"ps": ["p:1"]}, "task": {"type": "ps"}}), "no chief or worker"),
        (json.dumps({"cluster": {"worker": ["nohost"]}, "task": {"type": "worker"}}), "'nohost'"),
    ],
)
def test_malformed_tf_config(value, message):
    with pytest.raises(ValueError, match=message):
        discover({"TF_CONFIG": value})


# ----------------------------------------------------------------------------- Slurm


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
        ("a,b", ["a", "b"]),
        ("single", ["single"]),
        ("x[009-011]", ["x009", "x010", "x011"]),
        ("r[1-2]n[8,10]", ["r1n8", "r1n10", "r2n8", "r2n10"]),
        ("gpu[1-2]-ib,cpu[3]", ["gpu1-ib", "gpu2-ib", "cpu3"]),
    ],
)
def test_expand_nodelist(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize(
    ("nodelist", "message"),
    [
        ("node[1-3", "unbalanced '\\['"),
        ("node1-3]", "unbalanced '\\]'"),
        ("node[3-1]", "runs backwards"),
        ("node[a-b]", "bad range 'a-b'"),
        ("a,,b", "empty host"),
        ("", "SLURM_JOB_NODELIST is empty"),
        ("n[[1]]", "nested brackets"),
    ],
)
def test_bad_nodelists(nodelist, message):
    with pytest.raises(ValueError, match=message):
        expand_nodelist(nodelist)


def test_expand_tasks_per_node():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(ValueError, match="bad item 'x'"):
        expand_tasks_per_node("2,x")


SLURM = {
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "2",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_JOB_NODELIST": "node[01-02,07],gpu5",
    "SLURM_JOB_ID": "123456",
}


def test_slurm():
    env = discover(SLURM)
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (5, 8, 1, 2)
    assert env.master_addr == "node01" and env.source == "slurm"
    assert env.master_port == 10000 + 123456 % 20000  # the same on every task of the job
    assert env.hosts == ["node01", "node02", "node07", "gpu5"]


def test_slurm_master_port_and_addr_overrides():
    env = discover({**SLURM, "MASTER_PORT": "4000", "MASTER_ADDR": "login1"})
    assert (env.master_addr, env.master_port) == ("login1", 4000)


def test_slurm_uneven_tasks_per_node():
    env = {k: v for k, v in SLURM.items() if k != "SLURM_NTASKS_PER_NODE"}
    env.update(SLURM_TASKS_PER_NODE="3(x2),1,1", SLURM_NODEID="3", SLURM_LOCALID="0")
    assert discover(env).local_world_size == 1


def test_slurm_step_variables():
    env = discover(
        {
            "SLURM_PROCID": "1",
            "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_NODELIST": "c[1-2]",
            "SLURM_JOB_ID": "7",
        }
    )
    assert (env.world_size, env.local_world_size, env.master_addr) == (2, 1, "c1")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"SLURM_PROCID": "8"}, "SLURM_PROCID=8 is out of range for SLURM_NTASKS=8"),
        ({"SLURM_JOB_NODELIST": "node[1-"}, "SLURM_JOB_NODELIST='node\\[1-': unbalanced"),
        ({"SLURM_LOCALID": "2"}, "SLURM_LOCALID=2 is out of range for 2 tasks"),
        ({"SLURM_JOB_ID": None}, "set MASTER_PORT"),
    ],
)
def test_malformed_slurm(changes, message):
    env = dict(SLURM)
    for k, v in changes.items():
        if v is None:
            env.pop(k)
        else:
            env[k] = v
    with pytest.raises(ValueError, match=message):
        discover(env)


# ----------------------------------------------------------------------------- Open MPI

OMPI = {
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
}


def test_openmpi():
    env = discover({**OMPI, "MASTER_ADDR": "n0", "MASTER_PORT": "1234"})
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 4, 1, 2)
    assert (env.master_addr, env.master_port, env.source) == ("n0", 1234, "openmpi")


def test_openmpi_on_one_node_defaults_the_master():
    env = discover({**OMPI, "OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"})
    assert (env.master_addr, env.master_port) == ("127.0.0.1", 29500)


def test_openmpi_across_nodes_needs_a_master():
    with pytest.raises(ValueError, match="Open MPI across nodes: set MASTER_ADDR"):
        discover(OMPI)


def test_slurm_wins_over_openmpi():
    assert discover({**OMPI, **SLURM}).source == "slurm"
    assert discover({**SLURM, **tf("worker", 0)}).source == "tf_config"
    assert discover({**TORCHRUN, **tf("worker", 0)}).source == "torchrun"


# ----------------------------------------------------------------------------- ClusterSpec


def test_cluster_spec():
    spec = ClusterSpec(CLUSTER)
    assert spec.jobs == ["chief", "ps", "worker"]
    assert spec.num_tasks("worker") == 3 and spec.num_tasks("ps") == 2
    assert spec.task_address("worker", 1) == "w1:2222"
    assert spec.job_tasks("ps") == ["p0:2222", "p1:2222"]
    assert spec.as_dict() == CLUSTER
    assert ClusterSpec(spec) == spec


def test_cluster_spec_sparse_jobs_from_json():
    spec = ClusterSpec.from_tf_config(json.dumps({"cluster": {"worker": {"1": "a:1", "3": "b:2"}}}))
    assert spec.task_indices("worker") == [1, 3]
    assert spec.as_dict() == {"worker": {1: "a:1", 3: "b:2"}}
    with pytest.raises(ValueError, match="job 'worker' has no task 0"):
        spec.task_address("worker", 0)


def test_cluster_spec_from_environment():
    spec = ClusterSpec.from_tf_config(environ=tf("ps", 0))
    assert spec.task_address("chief", 0) == "c0:2222"
    with pytest.raises(ValueError, match="TF_CONFIG is not set"):
        ClusterSpec.from_tf_config(environ={})


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ({"worker": ["a:1", "b"]}, "'b' is not 'host:port'"),
        ({"worker": ["a:x"]}, "'a:x' is not 'host:port'"),
        ({"": ["a:1"]}, "job names must be non-empty"),
        ({"worker": "a:1"}, "tasks must be a list or dict"),
        ({"worker": {"one": "a:1"}}, "task index 'one' is not an integer"),
    ],
)
def test_bad_cluster_specs(cluster, message):
    with pytest.raises(ValueError, match=message):
        ClusterSpec(cluster)


def test_unknown_job():
    with pytest.raises(ValueError, match="no job 'evaluator'"):
        ClusterSpec(CLUSTER).num_tasks("evaluator")
