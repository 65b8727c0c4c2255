"""SINGA's ClusterProto: a training job's topology as worker groups and server groups, and the
training framework it describes (SINGA's "Distributed training frameworks"):

- Sandblaster: 1 worker group, 1 server group in processes of their own -> ``ps-sync``;
- AllReduce: 1 worker group, 1 server group co-located with the workers -> ``allreduce``;
- Downpour: several worker groups, 1 server group -> ``ps-async`` (groups are asynchronous,
  workers inside a group synchronous);
- Distributed Hogwild: several groups, each with its own co-located server group ->
  ``distributed-hogwild``.

pscore runs one worker (or one server shard) per process, so ``nworkers_per_procs`` and
``nservers_per_procs`` must be 1; the servers of a PS framework run as ps tasks."""

from __future__ import annotations

import dataclasses

__all__ = ["FIELDS", "Topology"]

FIELDS = (
    "nworker_groups",
    "nserver_groups",
    "nworkers_per_group",
    "nservers_per_group",
    "nworkers_per_procs",
    "nservers_per_procs",
    "server_worker_separate",
)


@dataclasses.dataclass(frozen=True)
class Topology:
    """ClusterProto's fields with SINGA's defaults; ValueError, naming the fields, for a
    topology no framework runs."""

    nworker_groups: int = 1
    nserver_groups: int = 1
    nworkers_per_group: int = 1
    nservers_per_group: int = 1
    nworkers_per_procs: int = 1
    nservers_per_procs: int = 1
    server_worker_separate: bool = False

    def __post_init__(self):
        for name in FIELDS[:-1]:
            value = getattr(self, name)
            least = 0 if name == "nserver_groups" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"ClusterSpec: {name} must be an int >= {least}, got {value!r}")
        if not isinstance(self.server_worker_separate, bool):
            raise TypeError(
                "ClusterSpec: server_worker_separate must be True or False, got "
                f"{self.server_worker_separate!r}"
            )
        for name in ("nworkers_per_procs", "nservers_per_procs"):
            if getattr(self, name) != 1:
                raise ValueError(
                    f"ClusterSpec: {name}={getattr(self, name)}: pscore runs one worker or server "
                    "shard per process; give 1 and more processes instead"
                )
        self.strategy  # noqa: B018 - refuses the topologies no framework runs

    @property
    def strategy(self) -> str:
        """The framework this topology describes, as a Trainer strategy name."""
        workers, servers = self.nworker_groups, self.nserver_groups
        if workers == 1 and servers <= 1:
            return "ps-sync" if servers == 1 and self.server_worker_separate else "allreduce"
        if servers == 1:
            return "ps-async"
        if servers == workers and not self.server_worker_separate:
            return "distributed-hogwild"
        raise ValueError(
            f"ClusterSpec: nworker_groups={workers} with nserver_groups={servers}"
            f"{' and server_worker_separate' if self.server_worker_separate else ''} is none of "
            "SINGA's frameworks: several worker groups share one server group (Downpour, "
            "ps-async) or each has its own co-located one (Distributed Hogwild)"
        )

    @property
    def workers(self) -> int:
        return self.nworker_groups * self.nworkers_per_group

    @property
    def servers(self) -> int:
        """Parameter-server shards (ps tasks) the framework needs: 0 for allreduce and
        distributed-hogwild, whose "servers" live in the workers."""
        if self.strategy in ("ps-sync", "ps-async"):
            return self.nserver_groups * self.nservers_per_group
        return 0
