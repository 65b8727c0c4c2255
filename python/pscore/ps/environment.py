"""Where a job's parameter servers are, read from the environment so that ``pserver`` and
``PSClient()`` need no addresses on the command line:

- ``PSCORE_STORE=URL``: the store (``tcp://``, ``file://``, ``redis://``) every shard publishes
  its address in and every worker reads them from;
- ``TF_CONFIG`` (Kubeflow's TFJob, tf.distribute): the ``ps`` job's tasks are the shards in
  index order; a ``ps`` task's own address is where its shard listens; the chief and worker
  tasks are the workers (ids as [pscore.cluster.discover][] ranks them).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket
from collections.abc import Mapping

from .. import _config
from ..cluster.discovery import ClusterEnv, discover
from ..cluster.spec import split_address

__all__ = [
    "ShardPlacement",
    "find_servers",
    "job_id",
    "servers_from_tf_config",
    "shard_from_tf_config",
    "store_url",
    "worker_id",
]


@dataclasses.dataclass(frozen=True)
class ShardPlacement:
    """What TF_CONFIG says about the shard a ``ps`` task serves."""

    shard: int
    num_shards: int
    num_workers: int
    address: str  # "host:port", as the workers' TF_CONFIG names it
    bind_host: str
    port: int


def store_url(environ: Mapping[str, str] | None = None) -> str | None:
    return _config.STORE.get(environ)


def _tf_config(environ: Mapping[str, str] | None) -> ClusterEnv | None:
    """TF_CONFIG's view of this task, or None when TF_CONFIG is unset. Read on its own (not
    after PSCORE_RANK / RANK, as discover() would): it is the only source with a ps job."""
    env = os.environ if environ is None else environ
    text = env.get("TF_CONFIG", "")
    return discover({"TF_CONFIG": text}) if text.strip() else None


def _ps_addresses(tf: ClusterEnv) -> list[str]:
    spec = tf.cluster_spec
    if spec is None or "ps" not in spec.jobs:
        return []
    indices = spec.task_indices("ps")
    if indices != list(range(len(indices))):
        raise ValueError(
            f"TF_CONFIG's ps tasks are numbered {indices}; parameter-server shards need "
            f"0..{len(indices) - 1}"
        )
    return spec.job_tasks("ps")


def _bind_host(host: str) -> str:
    """The TCPStore rule (docs/security.md): a loopback address is bound as it is; any other
    name may resolve to an address that is not this machine's (a Kubernetes Service, or no
    address yet while DNS catches up), so every interface is bound."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        try:
            ip = ipaddress.ip_address(socket.gethostbyname(host))
        except OSError:
            return "0.0.0.0"
    return host if ip.is_loopback else "0.0.0.0"


def shard_from_tf_config(environ: Mapping[str, str] | None = None) -> ShardPlacement | None:
    """The shard this ``ps`` task serves, or None without TF_CONFIG. ValueError when TF_CONFIG
    names another kind of task, or is malformed."""
    tf = _tf_config(environ)
    if tf is None:
        return None
    if tf.role != "ps":
        raise ValueError(
            f"TF_CONFIG says this is task {tf.role}:{tf.task_index}; pserver serves a 'ps' task "
            "(unset TF_CONFIG to give --shard and --num-shards yourself)"
        )
    addresses = _ps_addresses(tf)
    host, port = split_address(addresses[tf.task_index])
    return ShardPlacement(
        shard=tf.task_index,
        num_shards=len(addresses),
        num_workers=tf.world_size,
        address=addresses[tf.task_index],
        bind_host=_bind_host(host),
        port=port,
    )


def servers_from_tf_config(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The ps tasks' addresses in shard order, or None when TF_CONFIG is unset or has no ps
    job."""
    tf = _tf_config(environ)
    return (_ps_addresses(tf) or None) if tf is not None else None


def find_servers(environ: Mapping[str, str] | None = None) -> tuple[list[str] | None, str | None]:
    """(servers, None) from TF_CONFIG's ps job or (None, store URL) from PSCORE_STORE, which
    wins when both are set (a store also finds a shard restarted on another port)."""
    url = store_url(environ)
    if url is not None:
        return None, url
    servers = servers_from_tf_config(environ)
    if servers is not None:
        return servers, None
    raise ValueError(
        "PSClient: where are the servers? Pass servers=['host:port', ...] or store= (a Store or "
        f"a URL), or set {_config.STORE.name}=URL or a TF_CONFIG with a 'ps' job"
    )


def job_id(environ: Mapping[str, str] | None = None) -> str:
    """The parameter servers' job id: PSCORE_JOB_ID, unless pscore-run made that up for its own
    run (servers started outside the run could not know it), then the default, as without one."""
    if _config.JOB_ID_ORIGIN.raw(environ) == _config.MADE_UP_BY_LAUNCHER:
        return _config.JOB_ID.default
    return _config.JOB_ID.get(environ)


def worker_id(environ: Mapping[str, str] | None = None) -> int:
    """This process's worker id: its rank in the job (pscore-run, torchrun, TF_CONFIG's chief
    and workers, Slurm, Open MPI); -1 (a read-only observer) for TF's ps and evaluator tasks;
    0 with no launcher."""
    return discover(environ).rank
