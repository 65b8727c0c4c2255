"""The NCCL backend on a host without a GPU: NCCL's loading errors, and the real Python API
driving the NCCL communicator over the fake CUDA runtime and the fake NCCL
(tests/fakes/fake_nccl.c, one rank over host memory): every collective, stream order, the id
exchange and header checks through the store, the watchdog's timeout and async-error aborts,
and auto's fallback. Each case runs in a subprocess: a process loads each library once."""

# ruff: noqa: F811 - the fixture fake_cudart, imported, is a test argument
from __future__ import annotations

import textwrap

import pytest
from dist_helpers import run_rank_scripts
from fake_cuda import (  # noqa: F401 - fake_cudart is a fixture
    compile_fake,
    compile_library,
    fake_cudart,
    run_python,
)

PRELUDE = textwrap.dedent(
    """
    import ctypes, os, warnings
    import numpy as np
    import pscore
    from fake_cuda import FakeCudaBuffer, FakeNccl, FakeRuntime, caller_stream

    cuda = FakeRuntime(os.environ["PSCORE_CUDART_LIBRARY"])
    cuda.lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]

    def fake_nccl():  # its switches, through the handle the core loaded
        return FakeNccl(os.environ["PSCORE_NCCL_LIBRARY"])

    def nccl_log():
        return fake_nccl().log()

    def gpu(values, dtype=np.float32):
        return FakeCudaBuffer(np.array(values, dtype=dtype))

    def join(backend="nccl", **options):  # the default group: this one rank
        return pscore.init_process_group(backend, init_method="tcp://127.0.0.1:0", rank=0,
                                         world_size=1, **options)
    """
)


@pytest.fixture(scope="module")
def fake_nccl(tmp_path_factory) -> str:
    return compile_fake("fake_nccl.c", tmp_path_factory.mktemp("fake_nccl"))


def run(code: str, cudart: str, nccl: str, timeout: float = 60, **env) -> str:
    result = run_python(
        PRELUDE + textwrap.dedent(code), cudart, timeout, PSCORE_NCCL_LIBRARY=nccl, **env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture
def run_nccl(fake_cudart, fake_nccl):
    """run() over the fake runtime and the fake NCCL."""
    return lambda code, **env: run(code, fake_cudart, fake_nccl, **env)


def test_nccl_backend_without_nccl_says_what_was_tried_and_how_to_get_it(fake_cudart, tmp_path):
    missing = str(tmp_path / "libnccl.so.2")
    out = run(
        """
        try:
            join()
        except pscore.Error as e:
            print("ERROR", e)
        """,
        fake_cudart,
        missing,
    )
    assert "backend='nccl' needs NCCL" in out
    assert missing in out  # the candidate tried, with dlopen's reason
    assert "pip install nvidia-nccl-cu13" in out and "nvidia-nccl-cu12" in out


def test_a_library_without_the_symbols_is_named(fake_cudart, tmp_path):
    source = tmp_path / "partial.c"
    source.write_text("int ncclGetVersion(int* v) { *v = 22105; return 0; }\n")
    lib = compile_library(source, tmp_path)
    out = run(
        """
        from pscore import _gpu, cuda_libraries
        cuda_libraries.register_candidates()
        try:
            _gpu.nccl_version()
        except pscore.Error as e:
            print("ERROR", e)
        """,
        fake_cudart,
        lib,
    )
    assert f"ERROR {lib} has no symbol ncclGetUniqueId" in out


def test_auto_without_nccl_warns_once_and_keeps_cpu_tensors_working(fake_cudart, tmp_path):
    out = run(
        """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            g = join("auto")
            sub = pscore.new_group([0])
        print("WARNINGS", len(caught), caught[0].category.__name__, caught[0].message)
        print("NCCL", g.nccl, sub.nccl)
        x = np.ones(3, np.float32)
        pscore.all_reduce(x)
        print("CPU", x.tolist())
        """,
        fake_cudart,
        str(tmp_path / "missing.so"),
    )
    assert "WARNINGS 1 RuntimeWarning pscore backend='auto': NCCL did not load" in out
    assert "NCCL None None" in out
    assert "CPU [1.0, 1.0, 1.0]" in out


def test_every_collective_on_cuda_buffers_of_one_rank(run_nccl):
    out = run_nccl(
        """
        g = join()
        with caller_stream(42):
            x = gpu([1, 2, 3, 4])
            pscore.all_reduce(x, op="avg")
            pscore.broadcast(x, src=0)
            pscore.reduce(x, dst=0, op="max")
            flat, parts = gpu([0] * 4), [gpu([0] * 4)]
            pscore.all_gather_into_tensor(flat, x)
            pscore.all_gather(parts, x)
            rs = gpu([0] * 4)
            pscore.reduce_scatter_tensor(rs, x)
            rs_list = gpu([0] * 4)
            pscore.reduce_scatter(rs_list, [x])
            gathered = [gpu([0] * 4)]
            pscore.gather(x, gathered, dst=0)
            scattered = gpu([0] * 4)
            pscore.scatter(scattered, [x], src=0)
            a2a, a2a_single = [gpu([0] * 4)], gpu([0] * 4)
            pscore.all_to_all(a2a, [x])
            pscore.all_to_all_single(a2a_single, x)
            work = pscore.all_reduce(x, async_op=True)
        cuda.lib.cudaStreamSynchronize(42)
        outs = [flat, parts[0], rs, rs_list, gathered[0], scattered, a2a[0], a2a_single]
        print("VALUES", [o.array.tolist() for o in outs])
        print("WORK", work.wait(timeout=10), work.is_completed(), work.is_success())
        calls = [line for line in nccl_log() if line.startswith(("ncclAll", "ncclBr", "ncclRe"))]
        print("STREAMS", sorted({line.split("stream=")[1] for line in calls}))
        print("CALLS", [line.split()[0] for line in calls])
        copies = cuda.copies()
        print("COPY STREAMS", sorted({fields["stream"] for _, fields in copies}))
        y = np.arange(3, dtype=np.float32)
        pscore.all_reduce(y)  # a CPU array on the same group: TCP, not NCCL
        print("CPU", y.tolist(), len(calls) == len([l for l in nccl_log() if "stream=" in l]))
        pscore.destroy_process_group()
        print("LAST", nccl_log()[-1])
        """,
    )
    assert f"VALUES {[[1.0, 2.0, 3.0, 4.0]] * 8}" in out
    assert "WORK True True True" in out
    assert "STREAMS ['42']" in out  # every NCCL call on the caller's stream
    calls = "CALLS ['ncclAllReduce', 'ncclBroadcast', 'ncclReduce', 'ncclAllGather', "
    # one-element lists are back to back: NCCL's own allgather and reduce-scatter
    calls += "'ncclAllGather', 'ncclReduceScatter', 'ncclReduceScatter', 'ncclAllReduce']"
    assert calls in out
    assert "COPY STREAMS [42]" in out  # gather, scatter, all_to_all's own part too
    assert "CPU [0.0, 1.0, 2.0] True" in out
    assert "LAST ncclCommDestroy" in out


def test_an_operation_sees_work_queued_before_it_on_the_callers_stream(run_nccl):
    out = run_nccl(
        """
        join()
        src = np.array([5, 6, 7], np.float32)
        x, out = gpu([0, 0, 0]), gpu([0, 0, 0])
        cuda.lib.cudaMemcpyAsync.argtypes = [ctypes.c_void_p] * 2 + [
            ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        # A "kernel" writing x, queued on stream 7 before the collective: the fake runs queued
        # work only when the host waits, so reading x on the host now would see zeros.
        cuda.lib.cudaMemcpyAsync(x.array.ctypes.data, src.ctypes.data, 12, 1, 7)
        with caller_stream(7):
            work = pscore.all_gather_into_tensor(out, x, async_op=True)
        print("BEFORE", out.array.tolist())
        with caller_stream(9):
            work.wait()  # the caller's current stream (9) now waits for it, on the "GPU"
        print("WAITS", [f["stream"] for _, f in cuda.calls("cudaStreamWaitEvent")])
        work.wait(timeout=10)
        print("AFTER", out.array.tolist())
        """,
    )
    assert "BEFORE [0.0, 0.0, 0.0]" in out  # returned once enqueued
    assert "WAITS [9]" in out
    assert "AFTER [5.0, 6.0, 7.0]" in out


def test_what_nccl_cannot_do_is_a_clear_error(run_nccl):
    out = run_nccl(
        """
        join()
        x = gpu([1, 2], np.int32)
        for name, call in [
            ("band", lambda: pscore.all_reduce(x, op="band")),
            ("avg", lambda: pscore.all_reduce(x, op="avg")),
            ("self", lambda: pscore.send(x, dst=0)),
            ("any", lambda: pscore.recv(x)),
            ("device", lambda: pscore.all_reduce(FakeCudaBuffer(np.ones(2, np.float32), 1))),
            ("mixed", lambda: pscore.all_gather([np.zeros(2, np.int32)], x)),
        ]:
            try:
                call()
                print(name, "no error")
            except ValueError as e:
                print(name, "ValueError", e)
        """,
        FAKE_NCCL_VERSION="2805",  # 2.8.5 (codes before 2.9): before avg and bfloat16
    )
    assert "band ValueError allreduce: NCCL has no band reduction" in out
    assert "avg ValueError allreduce: NCCL 2.8.5 has no avg (it arrived in 2.10)" in out
    assert "self ValueError send: a rank cannot send to itself" in out
    assert "any ValueError irecv: NCCL cannot receive from any source" in out
    assert "device ValueError group world's NCCL communicator is on cuda:0" in out
    mixed = (
        "mixed ValueError rank 0: nccl allgather #3 (group world, ranks [0]): buffer 1 is on cpu"
    )
    assert mixed in out


def test_bad_lists_of_cuda_buffers_raise_what_host_ones_raise(run_nccl):
    # The NCCL path runs the core's list checks (bindings/buffer_lists.h) on its views.
    out = run_nccl(
        """
        join()
        x, y = gpu([1, 2]), gpu([1, 2, 3])
        for name, call in [
            ("count", lambda: pscore.all_gather([x, x], x)),
            ("dtype", lambda: pscore.reduce_scatter(x, [gpu([1, 2], np.int32)])),
            ("size", lambda: pscore.all_gather([y], x)),
            ("no list", lambda: pscore.gather(x, None, dst=0)),
            ("short", lambda: pscore.scatter(x, [], src=0)),
            ("mixed", lambda: pscore.all_to_all([x], [gpu([1, 2], np.float64)])),
            ("a2a count", lambda: pscore.all_to_all([x, x], [x])),
        ]:
            try:
                call()
                print(name, "no error")
            except (TypeError, ValueError) as e:
                print(name, type(e).__name__, e)
        print("CALLS", len([line for line in nccl_log() if "stream=" in line]))
        """,
    )
    assert "count ValueError all_gather: tensor_list has 2 entries, the group has 1 ranks" in out
    assert "dtype TypeError input_list[0] is int32, expected float32" in out
    assert "size ValueError tensor_list[0] has 3 elements, expected 2" in out
    assert "no list ValueError gather: the destination needs a gather_list of 1 tensors" in out
    assert "short ValueError scatter: the source needs a scatter_list of 1 tensors" in out
    assert "mixed TypeError all_to_all: mixed dtypes float32 and float64" in out
    assert "a2a count ValueError all_to_all: need 1 input and 1 output tensors" in out
    assert "CALLS 0" in out  # nothing reached NCCL


def test_a_stuck_operation_times_out_names_op_and_ranks_and_aborts(run_nccl):
    out = run_nccl(
        """
        import time
        join(timeout=1.0)
        x = gpu([1, 2])
        pscore.all_reduce(x, async_op=True).wait(timeout=10)
        cuda.set_stuck(True)  # nothing queued from now on completes
        pscore.all_reduce(x)  # returns once enqueued
        work = pscore.all_reduce(x, async_op=True)
        start = time.monotonic()
        try:
            work.wait(timeout=60)
        except pscore.TimeoutError as e:
            print("WAIT", round(time.monotonic() - start) < 30, e)
        try:
            pscore.all_reduce(x)
        except pscore.TimeoutError as e:
            print("LATER", e)
        print("ABORTED", nccl_log().count("ncclCommAbort"))
        cuda.set_stuck(False)
        pscore.destroy_process_group()
        print("DESTROYED", "ncclCommDestroy" in nccl_log())
        """,
    )
    culprit = "rank 0: nccl allreduce #2 (group world, ranks [0]) timed out after 1000 ms"
    aborted = "(group world, ranks [0]): the NCCL communicator was aborted: " + culprit
    assert f"WAIT True rank 0: nccl allreduce #3 {aborted}" in out
    assert f"LATER rank 0: nccl allreduce #4 {aborted}" in out
    assert "ABORTED 1" in out
    assert "DESTROYED False" in out  # an aborted communicator is not destroyed again


def test_an_async_nccl_error_aborts_with_ncclls_message(run_nccl):
    out = run_nccl(
        """
        join(timeout=30.0)
        x = gpu([1, 2])
        pscore.all_reduce(x, async_op=True).wait(timeout=10)
        cuda.set_stuck(True)
        work = pscore.all_reduce(x, async_op=True)
        fake_nccl().set_async_error(6)
        try:
            work.wait(timeout=60)
        except pscore.Error as e:
            print("WAIT", type(e).__name__, e)
        try:
            pscore.all_reduce(x)
        except pscore.Error as e:
            print("LATER", type(e).__name__, e)
        print("ABORTED", nccl_log().count("ncclCommAbort"))
        """,
    )
    message = "rank 0: NCCL reported an asynchronous error (group world): remote process exited"
    aborted = "(group world, ranks [0]): the NCCL communicator was aborted: " + message
    assert f"WAIT Error rank 0: nccl allreduce #2 {aborted}" in out
    assert f"LATER Error rank 0: nccl allreduce #3 {aborted}" in out
    assert "ABORTED 1" in out


def test_a_failed_join_is_raised_again_not_retried(run_nccl):
    out = run_nccl(
        """
        join()
        for _ in range(2):
            try:
                pscore.all_reduce(gpu([1.0]))
            except pscore.Error as e:
                print("ERROR", e)
        print("JOINS", sum(line.startswith("ncclCommInitRank") for line in nccl_log()))
        """,
        FAKE_NCCL_INIT_ERROR="2",
    )
    failed = "ERROR rank 0: ncclCommInitRank (group world, 1 ranks, cuda:0): unhandled system error"
    assert failed in out
    assert "(when this NCCL communicator was made)" in out
    assert "JOINS 1" in out


RANK = """
import os, sys
import numpy as np
import pscore
from fake_cuda import FakeCudaBuffer, FakeNccl
from pscore.store import TCPStore

rank = int(sys.argv[1])
store = TCPStore("127.0.0.1", int(sys.argv[2]), is_master=False, timeout=30)
g = pscore.init_process_group("nccl", store=store, rank=rank, world_size=2, timeout=30)
try:  # the first CUDA operation is a send/recv: the pair's communicator is made for it
    message = FakeCudaBuffer(np.ones(2, np.float32))
    pscore.send(message, dst=1) if rank == 0 else pscore.recv(message, src=0)
except pscore.Error as e:
    print("P2P", e)
comm = g.nccl.communicator(0)
for line in FakeNccl(os.environ["PSCORE_NCCL_LIBRARY"]).log():
    print("LOG", line)
x = FakeCudaBuffer(np.ones(4 + 4 * rank, np.float32))  # ranks disagree on the size
try:
    pscore.all_reduce(x)
except ValueError as e:
    print("CHECK", e)
"""


def test_the_unique_id_travels_through_the_store_and_headers_are_compared(fake_cudart, fake_nccl):
    outs = run_rank_scripts(
        RANK, 2, 120, PSCORE_CUDART_LIBRARY=fake_cudart, PSCORE_NCCL_LIBRARY=fake_nccl
    )
    inits = [[line for line in out.splitlines() if "ncclCommInitRank" in line] for out in outs]
    pair_id, group_id = (line.split("id=")[1] for line in inits[0])
    assert pair_id != group_id
    for r in range(2):  # the pair's communicator first, then the group's: both with rank 0's ids
        assert inits[r] == [
            f"LOG ncclCommInitRank nranks=2 rank={r} id={pair_id}",
            f"LOG ncclCommInitRank nranks=2 rank={r} id={group_id}",
        ]
    assert group_id.endswith("last=Z")  # all 128 bytes came through
    assert outs[0].count("LOG ncclGetUniqueId") == 2 and "ncclGetUniqueId" not in outs[1]
    assert "LOG ncclSend count=2 dtype=7 peer=1 " in outs[0]
    assert "LOG ncclRecv count=2 dtype=7 peer=0 " in outs[1]
    assert "P2P rank 0: nccl send #1 (group world send/recv, ranks [0, 1]): ncclSend:" in outs[0]
    assert "P2P rank 1: nccl recv #1 (group world send/recv, ranks [0, 1]): ncclRecv:" in outs[1]
    differ = "allreduce on group world: the ranks' calls differ (rank 0: allreduce float32 4 "
    for r, out in enumerate(outs):
        assert f"CHECK rank {r}: nccl {differ}" in out
        assert "rank 1: allreduce float32 8 SUM" in out
