"""``pscore-run``: starts the ranks of a script on this node, with torchrun's flags.

    pscore-run -n 4 train.py --lr 0.1                      # one node (like torchrun --standalone)
    pscore-run -n 2 -m mypackage.train
    pscore-run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 -n 4 train.py
    python -m pscore.launch -n 2 train.py
    pscore-run --workers 2 --servers 1 train.py            # a Trainer job with a parameter server

Node ``node_rank`` of ``nnodes`` starts ``nproc`` ranks: global rank node_rank * nproc +
local rank, world nnodes * nproc. Each rank gets PSCORE_RANK / PSCORE_WORLD_SIZE /
PSCORE_LOCAL_RANK / PSCORE_LOCAL_WORLD_SIZE / PSCORE_MASTER_ADDR / PSCORE_MASTER_PORT, torchrun's
RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT / GROUP_RANK /
GROUP_WORLD_SIZE, a PSCORE_JOB_ID shared by the job, OMP_NUM_THREADS=1 and PYTHONUNBUFFERED=1
unless already set. Each line a rank prints comes out prefixed with ``[rankN]: ``
(launch/output.py). Ranks run in their own process groups; SIGINT, SIGTERM and SIGHUP sent to
the launcher are forwarded to them. When a rank fails, the launcher says which, sends SIGTERM to
the others on this node (SIGKILL after the grace period), ends with a summary of the failure and
exits with the failing rank's code (128 + N for a rank killed by signal N). With ``--workers N
--servers M [--worker-groups G]`` it also starts M parameter-server tasks (``[psI]: `` lines)
with the environment of launch/roles.py; the run's status is then the workers'. See
docs/launch.md.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

from .. import _config
from .. import errors as pscore_errors
from ..cluster.spec import split_address
from . import affinity
from . import roles as job_roles
from .cli import DEFAULT_MASTER_PORT, DEFAULT_RDZV_PORT, parser
from .output import STDERR, STDOUT, Console, RankOutput, parse_std_streams, streams_for
from .supervisor import Rank, Supervisor, failure_summary

__all__ = [
    "DEFAULT_MASTER_PORT",
    "NodeConfig",
    "free_port",
    "main",
    "node_config",
    "rank_environment",
]

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_OUTPUT_DRAIN_S = 5.0  # after the ranks end, how long their pipes may still be read


@dataclasses.dataclass(frozen=True)
class NodeConfig:
    """This node's share of the job, resolved from the flags."""

    nnodes: int
    node_rank: int
    nproc: int
    master_addr: str
    master_port: int
    job_id: str
    job_id_made_up: bool  # not the user's: --rdzv-id and PSCORE_JOB_ID were not given

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc + local_rank


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (bound and released; the OS may hand it out again)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _node_count(text: str) -> int:
    low, sep, high = text.partition(":")
    try:
        nnodes, upper = int(low), int(high) if sep else int(low)
    except ValueError:
        raise ValueError(f"--nnodes {text!r} is not a node count") from None
    if nnodes != upper:
        raise ValueError(
            f"--nnodes {text}: pscore-run is not elastic, a node range is not supported; "
            f"give a fixed count (e.g. --nnodes {upper})"
        )
    if nnodes < 1:
        raise ValueError(f"--nnodes must be >= 1, got {nnodes}")
    return nnodes


def _master_endpoint(args, nnodes: int) -> tuple[str, int]:
    """(address, port) of rank 0's store; port 0 means: pick a free one (one node only)."""
    if args.rdzv_endpoint is not None:
        if args.master_addr is not None or args.master_port is not None:
            raise ValueError("give either --rdzv-endpoint or --master-addr / --master-port")
        endpoint = args.rdzv_endpoint
        if ":" not in endpoint.strip("[]") or endpoint.endswith("]"):
            endpoint = f"{endpoint}:{DEFAULT_RDZV_PORT}"
        try:
            return split_address(endpoint)
        except ValueError:
            raise ValueError(f"--rdzv-endpoint {args.rdzv_endpoint!r} is not HOST[:PORT]") from None
    if nnodes > 1 and args.master_addr is None:
        raise ValueError(
            f"--nnodes {nnodes} needs --master-addr (node 0's address, reachable from every "
            "node) or --rdzv-endpoint"
        )
    port = args.master_port
    if port is None:
        port = DEFAULT_MASTER_PORT if nnodes > 1 else 0
    if not 0 <= port <= 65535:
        raise ValueError(f"--master-port {port} is out of range")
    return args.master_addr or "127.0.0.1", port


def _check_rdzv_backend(args, nnodes: int) -> None:
    backend = args.rdzv_backend
    if backend == "static":
        return
    if backend != "c10d":
        raise ValueError(
            f"--rdzv-backend {backend!r} is not supported: use static (the default) or c10d"
        )
    if nnodes > 1 and args.node_rank is None:
        raise ValueError(
            "--rdzv-backend c10d across nodes assigns node ranks as nodes arrive (elastic), "
            "which pscore-run does not do: give each node its --node-rank"
        )


def _check_standalone(args, nnodes: int) -> None:
    given = {
        "--nnodes": nnodes != 1,
        "--node-rank": args.node_rank not in (None, 0),
        "--master-addr": args.master_addr is not None,
        "--master-port": args.master_port is not None,
        "--rdzv-endpoint": args.rdzv_endpoint is not None,
    }
    clashes = [flag for flag, set_ in given.items() if set_]
    if clashes:
        raise ValueError(
            f"--standalone runs one node with a free local port; it cannot be combined "
            f"with {', '.join(clashes)}"
        )


def _check_flags(args) -> None:
    """Refuses flag values that are wrong whatever the node (ValueError says which)."""
    if args.nproc < 1:
        raise ValueError(f"-n must be >= 1, got {args.nproc}")
    if not args.grace_period >= 0:  # also refuses nan
        raise ValueError(f"--grace-period must be >= 0 seconds, got {args.grace_period}")
    if args.max_restarts < 0:
        raise ValueError(f"--max-restarts must be >= 0, got {args.max_restarts}")
    if args.module and args.no_python:
        raise ValueError("-m runs a module with Python; it cannot be combined with --no-python")


def node_config(args, environ) -> NodeConfig:
    """Checks the flags and resolves them into this node's config; ValueError says what is
    wrong."""
    if args.nproc is None:
        args.nproc = args.workers or 1
    _check_flags(args)
    nnodes = _node_count(args.nnodes)
    if args.standalone:
        _check_standalone(args, nnodes)
    _check_rdzv_backend(args, nnodes)
    node_rank = 0 if args.node_rank is None else args.node_rank
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"--node-rank {node_rank} is out of range for --nnodes {nnodes}")
    addr, port = _master_endpoint(args, nnodes)
    if port == 0:
        if nnodes > 1:
            raise ValueError("across nodes the master port must be given: every node needs it")
        try:
            port = free_port(addr)
        except OSError as e:
            raise ValueError(f"cannot pick a free port on {addr!r} (this node's?): {e}") from None
    made_up = True
    if args.rdzv_id:
        job_id, made_up = args.rdzv_id, False
    elif _config.JOB_ID.raw(environ):
        job_id = _config.JOB_ID.raw(environ)
        made_up = _config.JOB_ID_ORIGIN.raw(environ) == _config.MADE_UP_BY_LAUNCHER  # nested
    elif nnodes > 1:
        job_id = f"pscore-run@{addr}:{port}"  # what every node derives alike
    else:
        job_id = uuid.uuid4().hex[:16]
    return NodeConfig(nnodes, node_rank, args.nproc, addr, port, job_id, made_up)


def rank_environment(base: dict, node: NodeConfig, local_rank: int) -> dict:
    """The environment of one local rank (a copy of ``base`` with the rendezvous variables)."""
    env = dict(base)
    values = {
        "RANK": node.global_rank(local_rank),
        "WORLD_SIZE": node.world_size,
        "LOCAL_RANK": local_rank,
        "LOCAL_WORLD_SIZE": node.nproc,
        "MASTER_ADDR": node.master_addr,
        "MASTER_PORT": node.master_port,
    }
    for name, value in values.items():
        env[name] = str(value)
        env["PSCORE_" + name] = str(value)
    env["GROUP_RANK"] = str(node.node_rank)
    env["GROUP_WORLD_SIZE"] = str(node.nnodes)
    env[_config.JOB_ID.name] = node.job_id
    env.pop(_config.JOB_ID_ORIGIN.name, None)
    if node.job_id_made_up:
        env[_config.JOB_ID_ORIGIN.name] = _config.MADE_UP_BY_LAUNCHER
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the launcher's pipes as printed
    return env


def _output_routes(args) -> tuple:
    """(to_console, to_files) as functions local rank -> Std bits."""
    if args.log_dir is None:
        if args.tee is not None or args.redirects is not None:
            raise ValueError("--tee and --redirects say which streams go to --log-dir's files")
        return (lambda _: STDOUT | STDERR), (lambda _: 0)
    tee = parse_std_streams(args.tee, "--tee") if args.tee is not None else None
    redirects = parse_std_streams(args.redirects, "--redirects") if args.redirects else 0
    if tee is None:
        tee = 0 if args.redirects is not None else STDOUT | STDERR

    def to_files(local_rank: int) -> int:
        return streams_for(tee, local_rank) | streams_for(redirects, local_rank)

    def to_console(local_rank: int) -> int:
        only_files = streams_for(redirects, local_rank) & ~streams_for(tee, local_rank)
        return (STDOUT | STDERR) & ~only_files

    return to_console, to_files


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the launcher dies (Linux), so ranks of a
    launcher killed with SIGKILL do not linger."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: no such guard, the launcher's signal forwarding still applies


def _spawn(command: list, env: dict, cpus=None):
    """Starts one rank; `cpus`: the CPUs it is bound to (affinity.py), None: unbound."""

    def in_child() -> None:
        _die_with_parent()
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=in_child,  # noqa: PLW1509
    )


def _worker_environment(node: NodeConfig, local_rank: int, roles=None) -> dict:
    env = rank_environment(os.environ, node, local_rank)
    if roles is not None:
        env = job_roles.worker_environment(env, roles, node.global_rank(local_rank))
    return env


def _start_ranks(
    command: list, node: NodeConfig, supervisor: Supervisor, roles=None, cpus=None
) -> list:
    """Starts the ps tasks (with roles) and the local ranks, local rank i bound to cpus[i] when
    cpus is given (every fork before any thread of ours exists: preexec_fn is not safe beside
    threads). Returns the Rank records; OSError when one cannot start."""
    ranks = []
    for shard in range(roles.servers if roles else 0):
        if supervisor.signalled is not None:
            return ranks
        env = job_roles.server_environment(rank_environment(os.environ, node, 0), roles, shard)
        ranks.append(Rank(shard, -1, _spawn(command, env), role="ps"))
        supervisor.add(ranks[-1])
    for local_rank in range(node.nproc):
        if supervisor.signalled is not None:
            break
        env = _worker_environment(node, local_rank, roles)
        bound = cpus[local_rank] if cpus else None
        ranks.append(Rank(node.global_rank(local_rank), local_rank, _spawn(command, env, bound)))
        supervisor.add(ranks[-1])
    return ranks


def _watch(
    ranks: list, command: list, supervisor: Supervisor, console: Console, args, node, roles, cpus
) -> int:
    """Copies the ranks' output until they end (restarting failed workers while
    --max-restarts allows); a failed run ends with its summary."""
    to_console, to_files = _output_routes(args)
    outputs, copying = {}, []

    def follow(r: Rank, log_dir: str | None = args.log_dir) -> None:
        lr, kind = r.local_rank, "ps" if r.role == "ps" else "rank"
        out = RankOutput(r.rank, r.proc, console, to_console(lr), to_files(lr), log_dir, kind)
        outputs[r.label] = out
        copying.append(out)
        out.start()

    def restart(failed: Rank, count: int) -> None:
        # Forked beside the output threads: _die_with_parent only calls prctl in the child.
        env = _worker_environment(node, failed.local_rank, roles)
        env[_config.RESTART_COUNT.name] = str(count)
        bound = cpus[failed.local_rank] if cpus else None
        again = Rank(failed.rank, failed.local_rank, _spawn(command, env, bound))
        supervisor.add(again)
        ranks.append(again)
        # a restart's files go to LOG_DIR/restart_N/: its predecessor's stay as they ended
        follow(again, args.log_dir and os.path.join(args.log_dir, f"restart_{count}"))

    def mark_gone(failed: Rank) -> None:
        from ..ps import discovery, environment
        from ..train.elastic import mark_gone

        job_id = environment.job_id(_worker_environment(node, failed.local_rank, roles))
        mark_gone(discovery.open_store(roles.store_url, 10.0), job_id, failed.rank)

    supervisor.restart = restart
    if args.elastic:
        supervisor.mark_gone = mark_gone
    for r in list(ranks):
        follow(r)
    code = supervisor.run()
    deadline = time.monotonic() + _OUTPUT_DRAIN_S
    for out in copying:
        out.join(deadline)
    failed = supervisor.failure
    if failed is not None and supervisor.signalled is None:
        others = [r for r in ranks if r is not failed]
        tail = list(outputs[failed.label].tail)
        console.message(failure_summary(args.target, failed, others, node.node_rank, tail))
    return code


def _make_log_dir(path: str | None) -> None:
    if path is None:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--log-dir {path}: cannot create it: {e.strerror or e}") from None


def _abort(supervisor: Supervisor, console: Console, message: str) -> int:
    console.message(f"pscore-run: {message}")
    supervisor.stop_all()
    supervisor.run()
    return 1


def main(argv: list | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        roles = job_roles.resolve(args, _node_count(args.nnodes), free_port)
        node = node_config(args, os.environ)
        if args.elastic and not (roles and roles.store_port):
            raise ValueError(
                "--elastic needs --workers N on one node (a Trainer job: the launcher serves "
                "its store)"
            )
        _output_routes(args)  # checks --tee / --redirects before anything starts
        _make_log_dir(args.log_dir)
    except ValueError as e:
        print(f"pscore-run: {e}", file=sys.stderr)
        return 2
    command = [args.target, *args.args]
    if not args.no_python:
        command = [sys.executable] + (["-m"] if args.module else []) + command
    cpus = affinity.rank_cpus(args.bind, node.nproc)
    console = Console()
    supervisor = Supervisor(
        args.grace_period,
        console.message,
        " on this node" if node.nnodes > 1 else "",
        args.max_restarts,
    )
    previous = {sig: signal.signal(sig, supervisor.on_signal) for sig in _FORWARDED}
    try:
        try:
            ranks = _start_ranks(command, node, supervisor, roles, cpus)
        except OSError as e:
            return _abort(supervisor, console, f"cannot start a rank: {e}")
        try:
            store = job_roles.host_store(roles, node.job_id) if roles and roles.store_port else None
        except (OSError, pscore_errors.Error) as e:
            return _abort(supervisor, console, f"cannot serve the job's store: {e}")
        if store is not None:
            console.message(f"pscore-run: the job's store: pscore status --store {roles.store_url}")
        try:
            return _watch(ranks, command, supervisor, console, args, node, roles, cpus)
        finally:
            del store  # served until every task has ended
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
