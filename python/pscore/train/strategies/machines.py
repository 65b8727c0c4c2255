"""Which workers share a machine (and so /dev/shm), for the Hogwild strategies: every worker's
local rank and local world size (ClusterEnv's, from pscore-run, torchrun, Slurm...) gathered,
checked to describe one block of consecutive ranks per machine, and a name prefix for the
machine's shared tables that no other job, run or machine on the host uses. In an elastic job
(Trainer(elastic=True)) both go through the job's store instead of a collective."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from ... import _config, collectives

__all__ = ["Machine", "elastic_machine", "elastic_table_prefix", "table_prefix", "this_machine"]


@dataclasses.dataclass(frozen=True)
class Machine:
    ranks: list[int]  # the workers on this machine, the first is its leader (local rank 0)
    machines: list[list[int]]  # every machine's workers, in rank order
    prefix: str  # shared-table names of this machine start with it

    @property
    def leader(self) -> int:
        return self.ranks[0]

    @property
    def leaders(self) -> list[int]:
        return [m[0] for m in self.machines]


def _local(run: Any) -> tuple[int, int]:
    env = run.env
    if env is None:  # a cluster given by hand: every worker counts as on its own machine
        return 0, 1
    return env.local_rank, env.local_world_size


def _machines(rank_info: list[tuple[int, int]]) -> list[list[int]]:
    """Blocks of consecutive ranks, one per machine, from every rank's (local rank, local
    world size); ValueError naming the first rank that does not fit."""
    machines, rank = [], 0
    while rank < len(rank_info):
        local_rank, size = rank_info[rank]
        block = list(range(rank, rank + size))
        if local_rank != 0 or size < 1 or block[-1] >= len(rank_info):
            raise ValueError(
                f"worker {rank} has local rank {local_rank} of {size}: the Hogwild strategies "
                "need the workers of a machine to be consecutive ranks starting at local rank 0 "
                "(as pscore-run and torchrun number them)"
            )
        for r in block:
            if rank_info[r] != (r - rank, size):
                raise ValueError(
                    f"worker {r} reports local rank {rank_info[r][0]} of {rank_info[r][1]}; "
                    f"as worker {rank}'s machine-mate it should be {r - rank} of {size}"
                )
        machines.append(block)
        rank += size
    return machines


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)[:48]


def this_machine(run: Any) -> Machine:
    """This worker's machine, from an all_gather over every worker (a collective: every worker
    calls it at the same point)."""
    import torch

    local_rank, local_size = _local(run)
    token = int.from_bytes(os.urandom(4), "little")
    mine = torch.tensor([local_rank, local_size, token], dtype=torch.int64)
    every = [torch.zeros(3, dtype=torch.int64) for _ in range(run.world_size)]
    collectives.all_gather(every, mine)
    machines = _machines([(int(t[0]), int(t[1])) for t in every])
    ranks = next(m for m in machines if run.rank in m)
    # The job id keeps jobs apart, worker 0's random token runs of the same job id, the leader
    # the machines (several may share one host's /dev/shm).
    return Machine(ranks, machines, table_prefix(f"{int(every[0][2]):08x}", ranks[0]))


def table_prefix(token: str, leader: int) -> str:
    """The shared tables' name prefix of the machine led by `leader`, in a run `token` names."""
    return f"{_safe(_config.JOB_ID.get())}-{token}-m{leader}"


def elastic_table_prefix(run: Any, job: Any, leader: int) -> str:
    """table_prefix in an elastic job (`job`: its elastic.ElasticJob): worker 0's token, kept
    in the job's store (a replacement worker 0 keeps its predecessor's)."""
    token = f"{int.from_bytes(os.urandom(4), 'little'):08x}"
    return table_prefix(job.leaders_value("hogwild_prefix", token, run.rank == 0), leader)


def elastic_machine(run: Any, job: Any) -> Machine:
    """This worker's machine in an elastic job: every worker's local rank and size gathered
    through the job's store (this_machine without a collective). ValueError naming the workers
    that left the job before saying where they ran."""
    local_rank, local_size = _local(run)
    job.post("machine", run.rank, f"{local_rank} {local_size}".encode())
    said = {r: v.decode() for r, v in job.collect("machine", "say its machine").items()}
    silent = [r for r in range(run.world_size) if r not in said]
    if silent:
        raise ValueError(
            f"worker(s) {silent} left the elastic job before saying which machine they ran on: "
            "the Hogwild strategies cannot tell the machines apart"
        )
    machines = _machines([(int(a), int(b)) for a, b in (said[r].split() for r in sorted(said))])
    ranks = next(m for m in machines if run.rank in m)
    return Machine(ranks, machines, elastic_table_prefix(run, job, ranks[0]))
