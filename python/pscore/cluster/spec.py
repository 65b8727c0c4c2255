"""ClusterSpec: TensorFlow's map from job names ("chief", "worker", "ps", ...) to task
addresses ("host:port"), built from a dict or read from ``TF_CONFIG``, optionally with SINGA's
ClusterProto topology (cluster/topology.py); and the two address helpers every server shares:
``split_address`` and ``advertised_host``."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Mapping
from typing import Union

from .topology import Topology

__all__ = ["ClusterSpec", "advertised_host", "split_address"]

JobTasks = Union[list[str], tuple[str, ...], Mapping[int, str]]


def split_address(address: str) -> tuple[str, int]:
    """ "host:port" (or "[v6]:port") -> (host, port); ValueError when malformed."""
    if not isinstance(address, str):
        raise ValueError(f"task address must be a 'host:port' string, got {address!r}")  # noqa: TRY004 - malformed config
    host, sep, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"task address {address!r} is not 'host:port'")
    return host, int(port_text)


def advertised_host(host: str) -> str:
    """The address others should dial for a server bound to `host`."""
    if host in ("", "0.0.0.0", "::"):
        name = socket.gethostname()
        try:
            return socket.gethostbyname(name)
        except OSError:
            return name
    return host


class ClusterSpec:
    """Job name -> tasks. Tasks are a list (index = position) or a dict index -> address
    (sparse, as TF allows). Every address is checked to be "host:port".

    SINGA's ClusterProto fields (``nworker_groups``, ``nserver_groups``, ``nworkers_per_group``,
    ``nservers_per_group``, ``nworkers_per_procs``, ``nservers_per_procs``,
    ``server_worker_separate``), given as keywords, make ``.topology`` (a
    pscore.cluster.topology.Topology, else None): the job's worker and server groups and the
    framework the Trainer's strategy="auto" picks from them."""

    def __init__(
        self,
        cluster: ClusterSpec | Mapping[str, JobTasks] | None = None,
        *,
        nworker_groups: int | None = None,
        nserver_groups: int | None = None,
        nworkers_per_group: int | None = None,
        nservers_per_group: int | None = None,
        nworkers_per_procs: int | None = None,
        nservers_per_procs: int | None = None,
        server_worker_separate: bool | None = None,
    ):
        singa = {
            "nworker_groups": nworker_groups,
            "nserver_groups": nserver_groups,
            "nworkers_per_group": nworkers_per_group,
            "nservers_per_group": nservers_per_group,
            "nworkers_per_procs": nworkers_per_procs,
            "nservers_per_procs": nservers_per_procs,
            "server_worker_separate": server_worker_separate,
        }
        given = {k: v for k, v in singa.items() if v is not None}
        self.topology: Topology | None = Topology(**given) if given else None
        if isinstance(cluster, ClusterSpec):
            if self.topology is None:
                self.topology = cluster.topology
            cluster = cluster.as_dict()
        if cluster is None:
            cluster = {}
        if not isinstance(cluster, Mapping):
            raise TypeError(f"ClusterSpec takes a dict job -> tasks, not {type(cluster).__name__}")
        self._jobs: dict[str, dict[int, str]] = {}
        self._dense: dict[str, bool] = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str) or not job:
                raise ValueError(f"job names must be non-empty strings, got {job!r}")
            self._jobs[job] = self._parse_tasks(job, tasks)
            self._dense[job] = not isinstance(tasks, Mapping)

    @staticmethod
    def _parse_tasks(job: str, tasks: JobTasks) -> dict[int, str]:
        if isinstance(tasks, Mapping):
            items = list(tasks.items())
        elif isinstance(tasks, (list, tuple)):
            items = list(enumerate(tasks))
        else:
            raise ValueError(f"job {job!r}: tasks must be a list or dict, got {tasks!r}")  # noqa: TRY004 - malformed config
        out: dict[int, str] = {}
        for key, address in items:
            try:
                index = int(key)  # JSON object keys arrive as strings
            except (TypeError, ValueError):
                raise ValueError(f"job {job!r}: task index {key!r} is not an integer") from None
            if index < 0:
                raise ValueError(f"job {job!r}: task index {index} is negative")
            split_address(address)
            out[index] = address
        return dict(sorted(out.items()))

    @classmethod
    def from_tf_config(
        cls,
        tf_config: str | Mapping | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ClusterSpec:
        """The "cluster" of a TF_CONFIG (a JSON string, a parsed dict, or, when None, the
        TF_CONFIG variable of ``environ`` / os.environ)."""
        if tf_config is None:
            env = os.environ if environ is None else environ
            if not env.get("TF_CONFIG", "").strip():
                raise ValueError("TF_CONFIG is not set")
            tf_config = env["TF_CONFIG"]
        if isinstance(tf_config, str):
            try:
                tf_config = json.loads(tf_config)
            except json.JSONDecodeError as e:
                raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from None
        if not isinstance(tf_config, Mapping) or not isinstance(tf_config.get("cluster"), Mapping):
            raise ValueError("TF_CONFIG has no 'cluster' object (job name -> task addresses)")  # noqa: TRY004 - malformed config
        return cls(tf_config["cluster"])

    @property
    def jobs(self) -> list[str]:
        return sorted(self._jobs)

    def _tasks(self, job: str) -> dict[int, str]:
        if job not in self._jobs:
            raise ValueError(f"no job {job!r} in the cluster (jobs: {self.jobs})")
        return self._jobs[job]

    def num_tasks(self, job: str) -> int:
        return len(self._tasks(job))

    def task_indices(self, job: str) -> list[int]:
        return list(self._tasks(job))

    def task_address(self, job: str, index: int) -> str:
        tasks = self._tasks(job)
        if index not in tasks:
            raise ValueError(f"job {job!r} has no task {index} (tasks: {list(tasks)})")
        return tasks[index]

    def job_tasks(self, job: str) -> list[str]:
        """Addresses of the job's tasks in index order."""
        return list(self._tasks(job).values())

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """Dense jobs as lists, sparse ones as dicts index -> address."""
        return {
            job: list(tasks.values()) if self._dense[job] else dict(tasks)
            for job, tasks in self._jobs.items()
        }

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ClusterSpec)
            and self._jobs == other._jobs
            and self.topology == other.topology
        )

    __hash__ = None  # equal by value, and its jobs are dicts: unhashable, as Python makes it

    def __bool__(self) -> bool:
        return bool(self._jobs) or self.topology is not None

    def __repr__(self) -> str:
        if self.topology is None:
            return f"ClusterSpec({self.as_dict()!r})"
        fields = dataclasses.asdict(self.topology)
        return (
            f"ClusterSpec({self.as_dict()!r}, {', '.join(f'{k}={v!r}' for k, v in fields.items())})"
        )
