"""Every optimizer pscore offers starts at torch.optim's defaults: the parameter server's
optimizers, SharedParameters' families, the Hogwild kernels' option structs (which SharedTable's
and the CUDA updates' keyword defaults read) all agree with torch's own signatures."""

from __future__ import annotations

import inspect

import pytest

from pscore import _hogwild
from pscore.hogwild import cuda
from pscore.hogwild.optim_options import DEFAULTS
from pscore.hogwild.table import SharedTable
from pscore.ps import optim

torch = pytest.importorskip("torch")


def _defaults(fn) -> dict:
    params = inspect.signature(fn).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def _struct(options) -> dict:
    out = {n: getattr(options, n) for n in dir(options) if not n.startswith("_")}
    out = {n: v for n, v in out.items() if not callable(v) and n != "step"}
    if "beta1" in out:
        out["betas"] = (out.pop("beta1"), out.pop("beta2"))
    return out


FAMILIES = [
    ("sgd", torch.optim.SGD, optim.SGD, _hogwild.SgdOptions),
    ("adagrad", torch.optim.Adagrad, optim.Adagrad, _hogwild.AdagradOptions),
    ("adam", torch.optim.Adam, optim.Adam, _hogwild.AdamOptions),
    ("adamw", torch.optim.AdamW, optim.AdamW, None),
    ("rmsprop", torch.optim.RMSprop, optim.RMSprop, None),
]


def _agree(ours: dict, theirs: dict, who: str) -> None:
    for name, value in ours.items():
        if name in theirs:
            assert value == pytest.approx(theirs[name]), f"{who}: {name}"


@pytest.mark.parametrize(("family", "torch_cls", "ps_cls", "struct"), FAMILIES)
def test_every_copy_of_an_optimizers_defaults_is_torchs(family, torch_cls, ps_cls, struct):
    theirs = _defaults(torch_cls.__init__)
    ps_fields = {f.name: f.default for f in ps_cls.__dataclass_fields__.values()}
    _agree(ps_fields, theirs, f"pscore.ps.optim.{ps_cls.__name__}")
    assert ps_fields.keys() <= theirs.keys()
    if family in DEFAULTS:
        _agree(DEFAULTS[family], theirs, f"SharedParameters {family!r}")
    if struct is not None:
        _agree(_struct(struct()), theirs, f"_hogwild.{struct.__name__}")


@pytest.mark.parametrize(
    ("entry", "struct"),
    [
        (SharedTable.sgd, _hogwild.SgdOptions),
        (SharedTable.adagrad, _hogwild.AdagradOptions),
        (SharedTable.adam, _hogwild.AdamOptions),
        (cuda.sgd, _hogwild.SgdOptions),
        (cuda.adagrad, _hogwild.AdagradOptions),
        (cuda.adam, _hogwild.AdamOptions),
    ],
)
def test_the_kernel_entry_points_default_to_their_option_struct(entry, struct):
    keywords = _defaults(entry)
    keywords.pop("step", None)
    _agree(keywords, _struct(struct()), entry.__qualname__)
    assert "lr" in keywords
