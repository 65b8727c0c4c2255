"""pscore-run's command line: torchrun's flags (dashes or underscores), the roles of a job with
parameter servers (--workers / --servers / --worker-groups) and the target script."""

from __future__ import annotations

import argparse

from .affinity import BIND_CHOICES

__all__ = ["DEFAULT_MASTER_PORT", "DEFAULT_RDZV_PORT", "parser"]

DEFAULT_MASTER_PORT = 29500  # torchrun's, for nodes that must agree on a port
DEFAULT_RDZV_PORT = 29400  # torchrun's, for an --rdzv-endpoint without a port


def parser() -> argparse.ArgumentParser:
    # No abbreviations: a script's own flag (--worker, --master) must reach the script, not be
    # taken for a prefix of one of pscore-run's (--workers, --master-addr).
    p = argparse.ArgumentParser(
        prog="pscore-run",
        allow_abbrev=False,
        description="Start the ranks of a training script on this node with the rendezvous "
        "environment set. Takes torchrun's flags (dashes or underscores): one node by default, "
        "several with --nnodes / --node-rank and node 0's --master-addr / --master-port (or "
        "--rdzv-endpoint). Every output line is prefixed with its rank.",
    )
    p.add_argument(
        "-n",
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc",
        type=int,
        default=None,
        help="ranks to start on this node (default 1)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="a Trainer job: the training workers to start (alone, the same as -n)",
    )
    p.add_argument(
        "--servers",
        type=int,
        default=None,
        help="with --workers: parameter-server tasks to start, running the same script with "
        "PSCORE_ROLE=ps (one node only)",
    )
    p.add_argument(
        "--worker-groups",
        "--worker_groups",
        type=int,
        default=None,
        help="with --workers: synchronous worker groups for ps-async / ssp (must divide "
        "--workers; default 1)",
    )
    p.add_argument(
        "--nnodes",
        default="1",
        help="number of nodes, each running one pscore-run (default 1; a MIN:MAX range only "
        "with MIN == MAX: pscore-run is not elastic)",
    )
    p.add_argument(
        "--node-rank",
        "--node_rank",
        type=int,
        default=None,
        help="this node's index, 0 .. nnodes-1 (default 0); node 0 hosts rank 0",
    )
    p.add_argument(
        "--master-addr",
        "--master_addr",
        default=None,
        help="node 0's address, reachable from every node (default 127.0.0.1; required "
        "with --nnodes > 1 unless --rdzv-endpoint is given)",
    )
    p.add_argument(
        "--master-port",
        "--master_port",
        type=int,
        default=None,
        help="rank 0's store port (default: a free port on one node, "
        f"{DEFAULT_MASTER_PORT} across nodes)",
    )
    p.add_argument(
        "--rdzv-endpoint",
        "--rdzv_endpoint",
        default=None,
        help="HOST[:PORT] of node 0, instead of --master-addr / --master-port "
        f"(port {DEFAULT_RDZV_PORT} when left out, 0 = a free port on one node)",
    )
    p.add_argument(
        "--rdzv-backend",
        "--rdzv_backend",
        default="static",
        help="static (default): fixed node ranks. c10d is accepted on one node, or with "
        "--node-rank on each node; other backends are refused",
    )
    p.add_argument(
        "--rdzv-id",
        "--rdzv_id",
        default=None,
        help="job id shared by every node (PSCORE_JOB_ID; default: the environment's, else "
        "a fresh one on one node and one derived from the master endpoint across nodes)",
    )
    p.add_argument(
        "--standalone",
        action="store_true",
        help="one node, rank 0's store on 127.0.0.1 at a free port (the default already)",
    )
    p.add_argument(
        "--log-dir",
        "--log_dir",
        default=None,
        help="also write each rank's output to DIR/rank_N/stdout.log and stderr.log "
        "(not prefixed); which streams: --tee / --redirects (default: both)",
    )
    p.add_argument(
        "--tee",
        "-t",
        default=None,
        help="with --log-dir: streams written to the files and the console: 1 stdout, "
        "2 stderr, 3 both, 0 none, or local_rank:value,... (default 3)",
    )
    p.add_argument(
        "--redirects",
        "-r",
        default=None,
        help="with --log-dir: streams written to the files only, not the console (same "
        "values as --tee; default 0)",
    )
    p.add_argument(
        "--grace-period",
        "--grace_period",
        type=float,
        default=5.0,
        help="seconds between SIGTERM and SIGKILL when stopping ranks (default 5)",
    )
    p.add_argument(
        "--bind",
        choices=BIND_CHOICES,
        default="cores",
        help="cores: bind the local ranks to disjoint slices of this node's CPUs, as mpirun "
        "does, when there are no more ranks than CPUs; none: leave them unbound (default "
        "%(default)s)",
    )
    p.add_argument(
        "--max-restarts",
        "--max_restarts",
        type=int,
        default=0,
        help="start a failed worker again, up to this many restarts in all (default 0: a "
        "failed rank ends the run); for Trainer(elastic=True) jobs, see docs/train.md",
    )
    p.add_argument(
        "--elastic",
        action="store_true",
        help="a Trainer(elastic=True) job on one node: a worker that fails with no restart "
        "left is marked gone in the job's store and the others go on without it (the run "
        "succeeds when they do); see docs/train.md",
    )
    p.add_argument(
        "-m", "--module", action="store_true", help="run the target as a module (python -m)"
    )
    p.add_argument(
        "--no-python",
        "--no_python",
        action="store_true",
        help="run the target as a program itself, not with this Python",
    )
    p.add_argument("target", help="the script (or, with -m, the module) to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to every rank")
    return p
