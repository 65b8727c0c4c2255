"""
pscore core: the enums every part takes
"""

from __future__ import annotations
import typing

__all__: list[str] = ["DType", "OptimizerKind", "ReduceOp"]

class DType:
    """
    Element types (csrc/common/dtype.h), by pscore's dtype names.

    Members:

      FLOAT16

      BFLOAT16

      FLOAT32

      FLOAT64

      INT8

      UINT8

      INT32

      INT64
    """

    BFLOAT16: typing.ClassVar[DType]  # value = <DType.BFLOAT16: 1>
    FLOAT16: typing.ClassVar[DType]  # value = <DType.FLOAT16: 0>
    FLOAT32: typing.ClassVar[DType]  # value = <DType.FLOAT32: 2>
    FLOAT64: typing.ClassVar[DType]  # value = <DType.FLOAT64: 3>
    INT32: typing.ClassVar[DType]  # value = <DType.INT32: 6>
    INT64: typing.ClassVar[DType]  # value = <DType.INT64: 7>
    INT8: typing.ClassVar[DType]  # value = <DType.INT8: 4>
    UINT8: typing.ClassVar[DType]  # value = <DType.UINT8: 5>
    __members__: typing.ClassVar[
        dict[str, DType]
    ]  # value = {'FLOAT16': <DType.FLOAT16: 0>, 'BFLOAT16': <DType.BFLOAT16: 1>, 'FLOAT32': <DType.FLOAT32: 2>, 'FLOAT64': <DType.FLOAT64: 3>, 'INT8': <DType.INT8: 4>, 'UINT8': <DType.UINT8: 5>, 'INT32': <DType.INT32: 6>, 'INT64': <DType.INT64: 7>}
    @typing.overload
    def __eq__(self, other: DType) -> bool: ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool: ...
    def __getstate__(self) -> int: ...
    def __hash__(self) -> int: ...
    def __index__(self) -> int: ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __int__(self) -> int: ...
    @typing.overload
    def __ne__(self, other: DType) -> bool: ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool: ...
    def __repr__(self) -> str: ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __str__(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class OptimizerKind:
    """
    Optimizers (csrc/common/optimizer_formulas.h), by torch.optim's names.

    Members:

      SGD

      ADAGRAD

      ADAM

      ADAMW

      RMSPROP
    """

    ADAGRAD: typing.ClassVar[OptimizerKind]  # value = <OptimizerKind.ADAGRAD: 1>
    ADAM: typing.ClassVar[OptimizerKind]  # value = <OptimizerKind.ADAM: 2>
    ADAMW: typing.ClassVar[OptimizerKind]  # value = <OptimizerKind.ADAMW: 3>
    RMSPROP: typing.ClassVar[OptimizerKind]  # value = <OptimizerKind.RMSPROP: 4>
    SGD: typing.ClassVar[OptimizerKind]  # value = <OptimizerKind.SGD: 0>
    __members__: typing.ClassVar[
        dict[str, OptimizerKind]
    ]  # value = {'SGD': <OptimizerKind.SGD: 0>, 'ADAGRAD': <OptimizerKind.ADAGRAD: 1>, 'ADAM': <OptimizerKind.ADAM: 2>, 'ADAMW': <OptimizerKind.ADAMW: 3>, 'RMSPROP': <OptimizerKind.RMSPROP: 4>}
    @typing.overload
    def __eq__(self, other: OptimizerKind) -> bool: ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool: ...
    def __getstate__(self) -> int: ...
    def __hash__(self) -> int: ...
    def __index__(self) -> int: ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __int__(self) -> int: ...
    @typing.overload
    def __ne__(self, other: OptimizerKind) -> bool: ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool: ...
    def __repr__(self) -> str: ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __str__(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class ReduceOp:
    """
    Reductions; band, bor and bxor take integer dtypes only.

    Members:

      SUM

      PROD

      MIN

      MAX

      AVG

      BAND

      BOR

      BXOR
    """

    AVG: typing.ClassVar[ReduceOp]  # value = <ReduceOp.AVG: 4>
    BAND: typing.ClassVar[ReduceOp]  # value = <ReduceOp.BAND: 5>
    BOR: typing.ClassVar[ReduceOp]  # value = <ReduceOp.BOR: 6>
    BXOR: typing.ClassVar[ReduceOp]  # value = <ReduceOp.BXOR: 7>
    MAX: typing.ClassVar[ReduceOp]  # value = <ReduceOp.MAX: 3>
    MIN: typing.ClassVar[ReduceOp]  # value = <ReduceOp.MIN: 2>
    PROD: typing.ClassVar[ReduceOp]  # value = <ReduceOp.PROD: 1>
    SUM: typing.ClassVar[ReduceOp]  # value = <ReduceOp.SUM: 0>
    __members__: typing.ClassVar[
        dict[str, ReduceOp]
    ]  # value = {'SUM': <ReduceOp.SUM: 0>, 'PROD': <ReduceOp.PROD: 1>, 'MIN': <ReduceOp.MIN: 2>, 'MAX': <ReduceOp.MAX: 3>, 'AVG': <ReduceOp.AVG: 4>, 'BAND': <ReduceOp.BAND: 5>, 'BOR': <ReduceOp.BOR: 6>, 'BXOR': <ReduceOp.BXOR: 7>}
    @typing.overload
    def __eq__(self, other: ReduceOp) -> bool: ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool: ...
    def __getstate__(self) -> int: ...
    def __hash__(self) -> int: ...
    def __index__(self) -> int: ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __int__(self) -> int: ...
    @typing.overload
    def __ne__(self, other: ReduceOp) -> bool: ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool: ...
    def __repr__(self) -> str: ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def __str__(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
