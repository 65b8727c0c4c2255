"""A SharedParameters-bound module passed to torch.multiprocessing.Process (as mnist_hogwild
passes `model`) stays bound on both sides, with the spawn, fork and forkserver start methods:
the child's writes reach the parent's parameters and the table, the parent's later writes reach
the child, and a bound tensor sent through a torch.multiprocessing queue is a view of the same
table. model.share_memory(), which moves the storage, is caught with a clear error."""

from __future__ import annotations

import traceback
import uuid

import pytest

torch = pytest.importorskip("torch")
mp = pytest.importorskip("torch.multiprocessing")

from pscore.hogwild import SharedParameters

ROUNDS = 20
TIMEOUT = 120


def _prefix(tag: str) -> str:
    return f"ptm-{tag}-{uuid.uuid4().hex[:8]}"


def _child(model, to_child, to_parent):
    try:
        torch.set_num_threads(1)
        opt = SharedParameters.of(model).optimizer(model)  # fails unless every parameter is bound
        weight = model.weight
        to_parent.put(("view", weight))  # pickled by torch's ForkingPickler: by table name
        for r in range(ROUNDS):
            with torch.no_grad():
                weight.add_(1.0)  # the child writes through its parameter
            to_parent.put(("wrote", r))
            assert to_child.get(timeout=TIMEOUT) == ("wrote", r)
            # the parent added 10 in between: the child sees it in its own parameter
            want = 11.0 * (r + 1)
            assert torch.all(weight == want), (r, weight, want)
        opt.zero_grad()
        model(torch.ones(1, 4)).sum().backward()
        opt.step()  # SGD(lr=0.5) on the tables: weight -= 0.5 * 1, bias -= 0.5
        to_parent.put(("done", None))
    except BaseException:  # noqa: BLE001 - every failure goes to the parent as text
        to_parent.put(("error", traceback.format_exc()))


def _expect(to_parent, kind):
    got, value = to_parent.get(timeout=TIMEOUT)
    if got == "error":
        pytest.fail(f"child failed:\n{value}")
    assert got == kind, (got, value)
    return value


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_a_bound_module_passed_to_a_process_stays_bound_both_ways(method):
    ctx = mp.get_context(method)
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    with SharedParameters(model, optimizer="sgd", lr=0.5, prefix=_prefix(method)) as shared:
        table = shared.tables["weight"]
        to_child, to_parent = ctx.Queue(), ctx.Queue()
        proc = ctx.Process(target=_child, args=(model, to_child, to_parent))
        proc.start()
        try:
            received = _expect(to_parent, "view")  # the child's parameter, sent back to us
            for r in range(ROUNDS):
                assert _expect(to_parent, "wrote") == r
                want = 11.0 * r + 1.0
                # the child's write is in the parent's parameter, the table and the received view
                assert torch.all(model.weight == want), (r, model.weight)
                assert (table.numpy() == want).all()
                assert torch.all(received == want)
                with torch.no_grad():
                    model.weight.add_(4.0)  # the parent's parameter is still the table...
                    received.add_(6.0)  # ...and so is the view the child sent
                assert (table.numpy() == want + 10.0).all()
                to_child.put(("wrote", r))
            _expect(to_parent, "done")
            proc.join(TIMEOUT)
            assert proc.exitcode == 0
        finally:
            if proc.is_alive():
                proc.kill()
        torch.testing.assert_close(model.weight, torch.full((3, 4), 11.0 * ROUNDS - 0.5))
        torch.testing.assert_close(model.bias, torch.full((3,), -0.5))
        SharedParameters.of(model)  # still bound after all the pickling


def test_share_memory_moves_the_storage_and_the_optimizer_says_so():
    model = torch.nn.Linear(4, 3)
    with SharedParameters(model, optimizer="sgd", lr=0.1, prefix=_prefix("shm")) as shared:
        opt = shared.optimizer(model)
        model.share_memory()  # torch copies the parameters into its own segment
        model(torch.ones(1, 4)).sum().backward()
        with pytest.raises(RuntimeError, match=r"'weight' is no longer bound .*share_memory"):
            opt.step()
        shared.bind(model)  # binding again restores the view; the table kept its values
        opt.step()
        assert model.weight.data_ptr() == shared.tables["weight"].torch().data_ptr()
    with pytest.raises(ValueError, match="not bound to shared tables"):
        SharedParameters.of(torch.nn.Linear(4, 3))
