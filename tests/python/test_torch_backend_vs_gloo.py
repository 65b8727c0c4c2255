"""Every torch.distributed call of torch_cases.py gives through the pscore backend what it gives
through gloo: the same cases run in real processes, once per backend, and are compared rank by
rank (a call gloo rejects must raise on pscore too). The self-checked cases, where gloo gives
wrong values or none, are checked against the values they should have."""

from __future__ import annotations

import pytest
import torch
from torch_cases import CASES, SELF_CHECKED, Raised
from torch_ranks import init, run_ranks


def run_cases(rank, world, backend, port):
    init(backend, rank, world, port, timeout_s=20)
    results = {}
    for name, fn in CASES.items():
        try:
            results[name] = fn(rank, world)
        except Exception as e:
            raise RuntimeError(f"case {name} on {backend}, rank {rank}: {e!r}") from e
    return results


@pytest.fixture(scope="module", params=[2, 3], ids=lambda w: f"world{w}")
def outcomes(request):
    world = request.param
    return {b: run_ranks(run_cases, world, b, timeout_s=240) for b in ("gloo", "pscore")}


def assert_same(ours, gloo, where: str) -> None:
    if isinstance(gloo, Raised) or isinstance(ours, Raised):
        assert isinstance(ours, Raised) == isinstance(gloo, Raised), (
            f"{where}: pscore gave {ours!r}, gloo gave {gloo!r}"
        )
    elif isinstance(gloo, torch.Tensor):
        assert isinstance(ours, torch.Tensor), f"{where}: pscore gave {ours!r}"
        assert (ours.layout, ours.dtype, ours.shape) == (gloo.layout, gloo.dtype, gloo.shape), (
            f"{where}: pscore gave {ours.layout} {ours.dtype} {tuple(ours.shape)}, "
            f"gloo {gloo.layout} {gloo.dtype} {tuple(gloo.shape)}"
        )
        if gloo.is_sparse:
            ours, gloo = ours.coalesce().to_dense(), gloo.coalesce().to_dense()
        torch.testing.assert_close(ours, gloo, msg=lambda m: f"{where}: {m}")
    elif isinstance(gloo, dict):
        assert isinstance(ours, dict) and ours.keys() == gloo.keys(), f"{where}: {ours} vs {gloo}"
        for k in gloo:
            assert_same(ours[k], gloo[k], f"{where}[{k!r}]")
    elif isinstance(gloo, (list, tuple)):
        assert type(ours) is type(gloo) and len(ours) == len(gloo), f"{where}: {ours} vs {gloo}"
        for i, (a, b) in enumerate(zip(ours, gloo)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert ours == gloo, f"{where}: pscore gave {ours!r}, gloo gave {gloo!r}"


@pytest.mark.parametrize("name", [n for n in CASES if n not in SELF_CHECKED])
def test_pscore_gives_what_gloo_gives(outcomes, name):
    for rank, gloo in outcomes["gloo"].items():
        assert_same(outcomes["pscore"][rank][name], gloo[name], f"rank {rank}: {name}")


@pytest.mark.parametrize("name", sorted(SELF_CHECKED))
def test_pscore_gives_the_expected_values(outcomes, name):
    for rank, results in outcomes["pscore"].items():
        for key, (got, expected) in results[name].items():
            assert_same(got, expected, f"rank {rank}: {name}[{key!r}]")


def test_both_backends_end_in_step(outcomes):
    for backend, results in outcomes.items():
        for rank, cases in results.items():
            got, expected = cases["still_in_step"]["sum"]
            assert_same(got, expected, f"{backend} rank {rank}: still_in_step")
