"""
pscore core: transports and collectives
"""

from __future__ import annotations
import collections.abc
import pscore._types
import pscore.buffer
import typing

__all__: list[str] = [
    "AllgatherAlgorithm",
    "AllreduceAlgorithm",
    "OpSnapshot",
    "ProcessGroup",
    "ReduceScatterAlgorithm",
    "ShmTransport",
    "TcpTransport",
    "Transport",
    "Work",
    "check_all_gather",
    "check_all_to_all",
    "check_gather",
    "check_reduce_scatter",
    "check_scatter",
    "fast_calls",
    "fast_view",
    "fast_view_torch",
    "install_signal_pipe",
    "ranks_fit_cores",
]

class AllgatherAlgorithm:
    """
    How allgathers run (csrc/collectives/process_group.h).

    Members:

      AUTO

      RING

      RECURSIVE_DOUBLING
    """

    AUTO: typing.ClassVar[AllgatherAlgorithm]  # value = <AllgatherAlgorithm.AUTO: 0>
    RECURSIVE_DOUBLING: typing.ClassVar[
        AllgatherAlgorithm
    ]  # value = <AllgatherAlgorithm.RECURSIVE_DOUBLING: 2>
    RING: typing.ClassVar[AllgatherAlgorithm]  # value = <AllgatherAlgorithm.RING: 1>
    __members__: typing.ClassVar[
        dict[str, AllgatherAlgorithm]
    ]  # value = {'AUTO': <AllgatherAlgorithm.AUTO: 0>, 'RING': <AllgatherAlgorithm.RING: 1>, 'RECURSIVE_DOUBLING': <AllgatherAlgorithm.RECURSIVE_DOUBLING: 2>}
    @typing.overload
    def __eq__(self, other: AllgatherAlgorithm) -> bool: ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool: ...
    def __getstate__(self) -> int: ...
    def __hash__(self) -> int: ...
    def __index__(self) -> int: ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __int__(self) -> int: ...
    @typing.overload
    def __ne__(self, other: AllgatherAlgorithm) -> bool: ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool: ...
    def __repr__(self) -> str: ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __str__(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class AllreduceAlgorithm:
    """
    How allreduces run (csrc/collectives/process_group.h).

    Members:

      AUTO

      RECURSIVE_DOUBLING

      RING

      HALVING_DOUBLING
    """

    AUTO: typing.ClassVar[AllreduceAlgorithm]  # value = <AllreduceAlgorithm.AUTO: 0>
    HALVING_DOUBLING: typing.ClassVar[
        AllreduceAlgorithm
    ]  # value = <AllreduceAlgorithm.HALVING_DOUBLING: 3>
    RECURSIVE_DOUBLING: typing.ClassVar[
        AllreduceAlgorithm
    ]  # value = <AllreduceAlgorithm.RECURSIVE_DOUBLING: 1>
    RING: typing.ClassVar[AllreduceAlgorithm]  # value = <AllreduceAlgorithm.RING: 2>
    __members__: typing.ClassVar[
        dict[str, AllreduceAlgorithm]
    ]  # value = {'AUTO': <AllreduceAlgorithm.AUTO: 0>, 'RECURSIVE_DOUBLING': <AllreduceAlgorithm.RECURSIVE_DOUBLING: 1>, 'RING': <AllreduceAlgorithm.RING: 2>, 'HALVING_DOUBLING': <AllreduceAlgorithm.HALVING_DOUBLING: 3>}
    @typing.overload
    def __eq__(self, other: AllreduceAlgorithm) -> bool: ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool: ...
    def __getstate__(self) -> int: ...
    def __hash__(self) -> int: ...
    def __index__(self) -> int: ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __int__(self) -> int: ...
    @typing.overload
    def __ne__(self, other: AllreduceAlgorithm) -> bool: ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool: ...
    def __repr__(self) -> str: ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __str__(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class OpSnapshot:
    @property
    def dtype(self) -> pscore._types.DType: ...
    @property
    def elapsed_us(self) -> int: ...
    @property
    def entered(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def running(self) -> bool: ...
    @property
    def waiting_on(self) -> int: ...

class ProcessGroup:
    def __init__(
        self,
        transport: Transport,
        timeout_ms: typing.SupportsInt | typing.SupportsIndex = 30000,
        spin_us: typing.SupportsInt | typing.SupportsIndex = -1,
        yield_us: typing.SupportsInt | typing.SupportsIndex = -1,
        small_allreduce_bytes: typing.SupportsInt | typing.SupportsIndex = 65536,
        allreduce_algorithm: AllreduceAlgorithm = ...,
        large_broadcast_bytes: typing.SupportsInt | typing.SupportsIndex = -1,
        allgather_algorithm: AllgatherAlgorithm = ...,
        reduce_scatter_algorithm: ReduceScatterAlgorithm = ...,
        ranks_fit_cores: typing.SupportsInt | typing.SupportsIndex = -1,
    ) -> None: ...
    def abort(self, arg0: str) -> None: ...
    def all_to_all(
        self, output_tensor_list: list | None, input_tensor_list: list | None, async_op: bool
    ) -> Work:
        """
        all_to_all of lists: input entry r to rank r, rank r's into output entry r.
        """
    def all_to_all_single(
        self,
        input: typing.Any,
        output: typing.Any,
        input_counts: collections.abc.Sequence[int] | None,
        output_counts: collections.abc.Sequence[int] | None,
        async_op: bool,
    ) -> Work:
        """
        all_to_all on one input and one output, split into input_counts / output_counts elements per rank (None or empty: size() equal blocks).
        """
    def allgather(self, tensor: typing.Any, tensor_list: list | None, async_op: bool) -> Work:
        """
        all_gather into one output per rank (a list), rank r's tensor into entry r.
        """
    def allgather_algorithm(
        self, count: typing.SupportsInt | typing.SupportsIndex, dtype: pscore._types.DType
    ) -> AllgatherAlgorithm:
        """
        The algorithm an allgather of count elements per rank takes in this group.
        """
    def allgather_into(self, input: typing.Any, output: typing.Any, async_op: bool) -> Work:
        """
        all_gather into one output of size() blocks, rank r's input in block r.
        """
    def allreduce(self, arg0: typing.Any, arg1: pscore._types.ReduceOp, arg2: bool) -> Work: ...
    def allreduce_algorithm(
        self, count: typing.SupportsInt | typing.SupportsIndex, dtype: pscore._types.DType
    ) -> AllreduceAlgorithm:
        """
        The algorithm an allreduce of count elements of dtype takes in this group.
        """
    def barrier(self, async_op: bool) -> Work: ...
    def broadcast(
        self, arg0: typing.Any, arg1: typing.SupportsInt | typing.SupportsIndex, arg2: bool
    ) -> Work: ...
    def broken_reason(self) -> str: ...
    def gather(
        self,
        tensor: typing.Any,
        gather_list: list | None,
        root: typing.SupportsInt | typing.SupportsIndex,
        async_op: bool,
    ) -> Work:
        """
        gather into the root's gather_list (None elsewhere), rank r's tensor into entry r.
        """
    def progress(self) -> OpSnapshot: ...
    def recv(
        self,
        arg0: pscore.buffer.BufferView,
        arg1: typing.SupportsInt | typing.SupportsIndex,
        arg2: typing.SupportsInt | typing.SupportsIndex,
        arg3: bool,
    ) -> Work: ...
    def recv_any(
        self,
        arg0: pscore.buffer.BufferView,
        arg1: typing.SupportsInt | typing.SupportsIndex,
        arg2: bool,
    ) -> Work: ...
    def reduce(
        self,
        arg0: typing.Any,
        arg1: pscore._types.ReduceOp,
        arg2: typing.SupportsInt | typing.SupportsIndex,
        arg3: bool,
    ) -> Work: ...
    def reduce_scatter(
        self,
        output: typing.Any,
        input_list: list | None,
        op: pscore._types.ReduceOp,
        async_op: bool,
    ) -> Work:
        """
        reduce_scatter of one input per rank (a list): entry r reduced into rank r's output.
        """
    def reduce_scatter_algorithm(
        self, count: typing.SupportsInt | typing.SupportsIndex, dtype: pscore._types.DType
    ) -> ReduceScatterAlgorithm:
        """
        The algorithm a reduce_scatter of count elements per rank takes in this group.
        """
    def reduce_scatter_from(
        self, input: typing.Any, output: typing.Any, op: pscore._types.ReduceOp, async_op: bool
    ) -> Work:
        """
        reduce_scatter of one input of size() blocks: block r reduced into rank r's output.
        """
    def scatter(
        self,
        tensor: typing.Any,
        scatter_list: list | None,
        root: typing.SupportsInt | typing.SupportsIndex,
        async_op: bool,
    ) -> Work:
        """
        scatter of the root's scatter_list (None elsewhere), entry r into rank r's tensor.
        """
    def send(
        self,
        arg0: pscore.buffer.BufferView,
        arg1: typing.SupportsInt | typing.SupportsIndex,
        arg2: typing.SupportsInt | typing.SupportsIndex,
        arg3: bool,
    ) -> Work: ...
    @property
    def rank(self) -> int: ...
    @property
    def ranks_fit_cores(self) -> bool:
        """
        Whether auto's algorithm choices take the ranks to fit on the cores (as every rank agreed at connect).
        """
    @property
    def size(self) -> int: ...
    @property
    def transport(self) -> str: ...

class ReduceScatterAlgorithm:
    """
    How reduce_scatters run (csrc/collectives/process_group.h).

    Members:

      AUTO

      RING

      RECURSIVE_HALVING
    """

    AUTO: typing.ClassVar[ReduceScatterAlgorithm]  # value = <ReduceScatterAlgorithm.AUTO: 0>
    RECURSIVE_HALVING: typing.ClassVar[
        ReduceScatterAlgorithm
    ]  # value = <ReduceScatterAlgorithm.RECURSIVE_HALVING: 2>
    RING: typing.ClassVar[ReduceScatterAlgorithm]  # value = <ReduceScatterAlgorithm.RING: 1>
    __members__: typing.ClassVar[
        dict[str, ReduceScatterAlgorithm]
    ]  # value = {'AUTO': <ReduceScatterAlgorithm.AUTO: 0>, 'RING': <ReduceScatterAlgorithm.RING: 1>, 'RECURSIVE_HALVING': <ReduceScatterAlgorithm.RECURSIVE_HALVING: 2>}
    @typing.overload
    def __eq__(self, other: ReduceScatterAlgorithm) -> bool: ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool: ...
    def __getstate__(self) -> int: ...
    def __hash__(self) -> int: ...
    def __index__(self) -> int: ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __int__(self) -> int: ...
    @typing.overload
    def __ne__(self, other: ReduceScatterAlgorithm) -> bool: ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool: ...
    def __repr__(self) -> str: ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __str__(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class ShmTransport(Transport):
    def __init__(
        self,
        rank: typing.SupportsInt | typing.SupportsIndex,
        size: typing.SupportsInt | typing.SupportsIndex,
        job_id: str = "pscore",
        ring_bytes: typing.SupportsInt | typing.SupportsIndex = 4194304,
        p2p_ring_bytes: typing.SupportsInt | typing.SupportsIndex = 1048576,
        single_copy_bytes: typing.SupportsInt | typing.SupportsIndex = 18446744073709551615,
        single_copy_reduce_bytes: typing.SupportsInt | typing.SupportsIndex = 18446744073709551615,
    ) -> None: ...
    def connect(
        self,
        names: collections.abc.Sequence[str],
        tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex],
    ) -> None: ...
    def single_copy_from(self, peer: typing.SupportsInt | typing.SupportsIndex) -> bool: ...
    def unlink(self) -> None: ...
    @property
    def segment_name(self) -> str: ...
    @property
    def token(self) -> int: ...

class TcpTransport(Transport):
    def __init__(
        self,
        rank: typing.SupportsInt | typing.SupportsIndex,
        size: typing.SupportsInt | typing.SupportsIndex,
        host: str = "127.0.0.1",
        port: typing.SupportsInt | typing.SupportsIndex = 0,
        job_id: str = "pscore",
        buffer_bytes: typing.SupportsInt | typing.SupportsIndex = 0,
        auth_token: str | None = None,
        insecure: bool | None = None,
        epoll_min_fds: typing.SupportsInt | typing.SupportsIndex = 8,
    ) -> None: ...
    def connect(
        self,
        hosts: collections.abc.Sequence[str],
        ports: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex],
        timeout_ms: typing.SupportsInt | typing.SupportsIndex,
    ) -> None: ...
    @property
    def port(self) -> int: ...

class Transport:
    @property
    def name(self) -> str: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...

class Work:
    def exception_message(self) -> str: ...
    def failed(self) -> bool: ...
    def is_completed(self) -> bool: ...
    def wait(self, timeout_ms: typing.SupportsInt | typing.SupportsIndex = -1) -> bool: ...
    @property
    def source(self) -> int: ...
    @property
    def what(self) -> str: ...

def check_all_gather(
    tensor: pscore.buffer.BufferView,
    tensor_list: collections.abc.Sequence[pscore.buffer.BufferView],
    ranks: typing.SupportsInt | typing.SupportsIndex,
) -> None:
    """
    Raises what all_gather raises for these lists.
    """

def check_all_to_all(
    output_tensor_list: collections.abc.Sequence[pscore.buffer.BufferView],
    input_tensor_list: collections.abc.Sequence[pscore.buffer.BufferView],
    ranks: typing.SupportsInt | typing.SupportsIndex,
) -> None:
    """
    Raises what all_to_all raises for these.
    """

def check_gather(
    tensor: pscore.buffer.BufferView,
    gather_list: collections.abc.Sequence[pscore.buffer.BufferView],
    given: bool,
    at_root: bool,
    ranks: typing.SupportsInt | typing.SupportsIndex,
) -> None:
    """
    Raises what gather raises for these (given: the caller passed a list).
    """

def check_reduce_scatter(
    output: pscore.buffer.BufferView,
    input_list: collections.abc.Sequence[pscore.buffer.BufferView],
    ranks: typing.SupportsInt | typing.SupportsIndex,
) -> None:
    """
    Raises what reduce_scatter raises for these.
    """

def check_scatter(
    tensor: pscore.buffer.BufferView,
    scatter_list: collections.abc.Sequence[pscore.buffer.BufferView],
    given: bool,
    at_root: bool,
    ranks: typing.SupportsInt | typing.SupportsIndex,
) -> None:
    """
    Raises what scatter raises for these (given: the caller passed a list).
    """

def fast_calls(
    group: ProcessGroup,
) -> dict[str, collections.abc.Callable[..., pscore._C.Work | None]]:
    """
    The group's collectives by name, as functions of positional arguments that skip pybind11's dispatcher: each returns None, or the Work of async_op or of a call queued behind other work.
    """

def fast_view(x, writable):
    """
    The pscore.buffer.BufferView of numpy array or torch tensor x, in place; None when pscore.buffer must explain what is wrong with x, or x is neither (or a tensor before fast_view_torch).
    """

def fast_view_torch(
    tensor_type: type, plain_types: tuple, strided: typing.Any, dtypes: dict
) -> None:
    """
    Hands fast_view torch.Tensor, the plain tensor types, torch.strided and {torch dtype: pscore dtype code}.
    """

def install_signal_pipe(signum: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    Handles signum (when it has no handler yet) by writing a byte to a pipe; returns the pipe's read end, or -1 when the signal already had a handler.
    """

def ranks_fit_cores(ranks: typing.SupportsInt | typing.SupportsIndex) -> bool:
    """
    Whether this many ranks fit on this host's cores (each may poll on a core of its own).
    """
