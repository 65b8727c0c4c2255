"""Where a process sits in its job: ``discover()`` reads what launchers set (pscore-run,
torchrun, TF_CONFIG, Slurm, Open MPI), ``ClusterSpec`` is TensorFlow's job -> task-address map,
and the Slurm list syntax is expanded by cluster/slurm.py."""

from .discovery import ClusterEnv, discover
from .slurm import expand_nodelist, expand_tasks_per_node
from .spec import ClusterSpec, split_address

__all__ = [
    "ClusterEnv",
    "ClusterSpec",
    "discover",
    "expand_nodelist",
    "expand_tasks_per_node",
    "split_address",
]
