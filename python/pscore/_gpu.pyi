from __future__ import annotations
import collections.abc
import pscore._types
import pscore.buffer
import typing

__all__: list[str] = [
    "NcclCommunicator",
    "NcclWork",
    "cuda_device_count",
    "cuda_runtime_path",
    "nccl_path",
    "nccl_unique_id",
    "nccl_version",
    "set_cuda_runtime_candidates",
    "set_nccl_candidates",
    "set_staging_chunk_bytes",
    "staging_chunk_bytes",
]

class NcclCommunicator:
    def __init__(
        self,
        rank: typing.SupportsInt | typing.SupportsIndex,
        size: typing.SupportsInt | typing.SupportsIndex,
        unique_id: bytes,
        device: typing.SupportsInt | typing.SupportsIndex,
        timeout_ms: typing.SupportsInt | typing.SupportsIndex = 1800000,
        group: str = "world",
        ranks: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = [],
    ) -> None:
        """
        Joins the group's communicator on CUDA device `device` (blocks until all ranks do).
        """
    def abort(self, reason: str) -> None:
        """
        Aborts the communicator: outstanding and later operations raise `reason`.
        """
    def all_to_all(
        self,
        inputs: collections.abc.Sequence[pscore.buffer.BufferView],
        outputs: collections.abc.Sequence[pscore.buffer.BufferView],
    ) -> NcclWork: ...
    def allgather(
        self,
        input: pscore.buffer.BufferView,
        outputs: collections.abc.Sequence[pscore.buffer.BufferView],
    ) -> NcclWork: ...
    def allreduce(
        self, buffer: pscore.buffer.BufferView, op: pscore._types.ReduceOp
    ) -> NcclWork: ...
    def broadcast(
        self, buffer: pscore.buffer.BufferView, root: typing.SupportsInt | typing.SupportsIndex
    ) -> NcclWork: ...
    def broken_reason(self) -> str: ...
    def destroy(self) -> None:
        """
        Waits for the outstanding operations (up to the timeout), then destroys it.
        """
    def gather(
        self,
        input: pscore.buffer.BufferView,
        outputs: collections.abc.Sequence[pscore.buffer.BufferView],
        root: typing.SupportsInt | typing.SupportsIndex,
    ) -> NcclWork: ...
    def recv(
        self, buffer: pscore.buffer.BufferView, peer: typing.SupportsInt | typing.SupportsIndex
    ) -> NcclWork: ...
    def reduce(
        self,
        buffer: pscore.buffer.BufferView,
        op: pscore._types.ReduceOp,
        root: typing.SupportsInt | typing.SupportsIndex,
    ) -> NcclWork: ...
    def reduce_scatter(
        self,
        inputs: collections.abc.Sequence[pscore.buffer.BufferView],
        output: pscore.buffer.BufferView,
        op: pscore._types.ReduceOp,
    ) -> NcclWork: ...
    def scatter(
        self,
        inputs: collections.abc.Sequence[pscore.buffer.BufferView],
        output: pscore.buffer.BufferView,
        root: typing.SupportsInt | typing.SupportsIndex,
    ) -> NcclWork: ...
    def send(
        self, buffer: pscore.buffer.BufferView, peer: typing.SupportsInt | typing.SupportsIndex
    ) -> NcclWork: ...
    @property
    def device(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...

class NcclWork:
    def exception_message(self) -> str: ...
    def failed(self) -> bool: ...
    def is_completed(self) -> bool: ...
    def wait(self, timeout_ms: typing.SupportsInt | typing.SupportsIndex = -1) -> bool: ...
    def wait_stream(self, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Orders `stream` (a cudaStream_t as an integer) after the operation on the GPU, without blocking; raises the operation's failure when it has failed already.
        """
    @property
    def what(self) -> str: ...

def cuda_device_count() -> int:
    """
    The CUDA devices the runtime sees (loads it first).
    """

def cuda_runtime_path() -> str:
    """
    Loads the CUDA runtime (once) and returns the file it came from; pscore.Error listing every candidate tried when none loads.
    """

def nccl_path() -> str:
    """
    Loads NCCL (once) and returns the file it came from; pscore.Error listing every candidate tried when none loads, or naming the symbol a library lacks.
    """

def nccl_unique_id() -> bytes:
    """
    A new NCCL unique id (ncclGetUniqueId): the bytes rank 0 hands the others.
    """

def nccl_version() -> str:
    """
    The loaded NCCL's version, as "2.21.5" (loads it first).
    """

def set_cuda_runtime_candidates(candidates: collections.abc.Sequence[str]) -> None:
    """
    Paths or sonames the CUDA runtime may be loaded from, in order, for its first load.
    """

def set_nccl_candidates(candidates: collections.abc.Sequence[str]) -> None:
    """
    Paths or sonames NCCL may be loaded from, in order, for its first load.
    """

def set_staging_chunk_bytes(nbytes: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    The chunk size of CUDA buffers staged through pinned host memory (gpu/staging.h).
    """

def staging_chunk_bytes() -> int: ...
