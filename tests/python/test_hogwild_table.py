"""SharedTable: creation, attaching by name, zero-copy views, pickling, lifecycle and errors."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

from pscore.hogwild import SharedTable


def _name(tag: str) -> str:
    return f"pt-{tag}-{uuid.uuid4().hex[:10]}"


def _exists(name: str) -> bool:
    return os.path.exists(SharedTable.shm_path(name))


@pytest.fixture
def table():
    t = SharedTable.create(_name("fx"), (16, 8), optimizer="adagrad")
    yield t
    t.close()


def test_create_attach_share_memory_and_close_removes(table):
    other = SharedTable.attach(table.name)
    assert other.shape == (16, 8) and other.dtype == np.float32 and other.optimizer == "adagrad"
    assert table.is_creator and not other.is_creator
    assert table.live_attachments() == 2
    table.numpy()[3, 2] = 5.0
    assert other.numpy()[3, 2] == 5.0
    assert _exists(table.name)
    table.close()
    assert table.closed and _exists(table.name)
    other.close()
    assert not _exists(table.name)


def test_views_are_zero_copy_numpy_and_torch(table):
    torch = pytest.importorskip("torch")
    arr, ten = table.numpy(), table.torch()
    assert ten.data_ptr() == arr.ctypes.data
    assert ten.shape == torch.Size([16, 8]) and ten.dtype == torch.float32
    ten[1] += 2.0
    assert arr[1, 0] == 2.0
    st = table.state("sum", as_torch=True)
    st.fill_(0.5)
    assert table.state("sum")[7, 7] == 0.5
    assert table.state("sum").ctypes.data != arr.ctypes.data


def test_views_outlive_close(table):
    arr = table.numpy()
    table.close()
    arr[0, 0] = 1.0  # still mapped: the view keeps the mapping alive
    assert arr[0, 0] == 1.0


def test_init_initial_accumulator_dtypes_and_shapes():
    init = np.arange(12, dtype=np.float64).reshape(3, 4)
    with SharedTable.create(
        _name("init"), (3, 4), "float64", optimizer="adagrad", init=init, initial_accumulator=0.1
    ) as t:
        np.testing.assert_array_equal(t.numpy(), init)
        assert t.numpy().dtype == np.float64
        np.testing.assert_array_equal(t.state("sum"), np.full((3, 4), 0.1))
    with SharedTable.create(_name("scalar"), 5, init=2.5) as t:
        assert t.shape == (5,)
        np.testing.assert_array_equal(t.numpy(), np.full(5, 2.5, np.float32))
    with SharedTable.create(_name("4d"), (2, 3, 4, 5), optimizer="adam") as t:
        assert t.numpy().shape == (2, 3, 4, 5)
        assert t.state("exp_avg").shape == (2, 3, 4, 5)
        assert t.state("exp_avg_sq").shape == (2, 3, 4, 5)


def test_pickling_attaches_by_name(table):
    table.numpy()[0] = 9.0
    copy = pickle.loads(pickle.dumps(table))
    assert copy.name == table.name and copy.numpy()[0, 0] == 9.0
    assert table.live_attachments() == 2
    copy.close()


def test_default_names_are_unique():
    a = SharedTable.create(None, (2,))
    b = SharedTable.create(None, (2,))
    assert a.name != b.name
    a.close()
    b.close()


def test_exist_ok_attaches_to_the_same_shape_only(table):
    same = SharedTable.create(table.name, (16, 8), optimizer="adagrad", exist_ok=True)
    assert not same.is_creator
    same.close()
    with pytest.raises(ValueError, match=r"exists with shape \(16, 8\), not \(16, 4\)"):
        SharedTable.create(table.name, (16, 4), optimizer="adagrad", exist_ok=True)
    with pytest.raises(ValueError, match=r"exists with dtype float32, not float64"):
        SharedTable.create(table.name, (16, 8), "float64", optimizer="adagrad", exist_ok=True)
    with pytest.raises(ValueError, match=r"exists with optimizer='adagrad', not 'adam'"):
        SharedTable.create(table.name, (16, 8), optimizer="adam", exist_ok=True)
    with pytest.raises(ValueError, match=r"exists with shape \(16, 8\), not \(4,\)"):
        SharedTable.attach(table.name, shape=4)
    assert table.live_attachments() == 1  # the failed attaches released their handles


def test_name_errors(table):
    with pytest.raises(FileExistsError, match="the name is taken"):
        SharedTable.create(table.name, (16, 8))
    missing = _name("missing")
    with pytest.raises(FileNotFoundError, match=f"no such table .*pscore_hw_{missing}"):
        SharedTable.attach(missing)
    with pytest.raises(FileNotFoundError, match="after 50 ms"):
        SharedTable.attach(missing, timeout=0.05)
    with pytest.raises(ValueError, match="must be 1-200 characters"):
        SharedTable.create("no/slashes", (2,))


def test_spec_errors():
    n = _name("spec")
    with pytest.raises(TypeError, match="float32 or float64, not int32"):
        SharedTable.create(n, (2,), "int32")
    with pytest.raises(ValueError, match="1 to 4 dimensions, each > 0"):
        SharedTable.create(n, (2, 0))
    with pytest.raises(ValueError, match="1 to 4 dimensions"):
        SharedTable.create(n, (1, 1, 1, 1, 1))
    with pytest.raises(ValueError, match="optimizer 'rmsprop'"):
        SharedTable.create(n, (2,), optimizer="rmsprop")
    with pytest.raises(ValueError, match=r"init has shape \(3,\), the table \(2,\)"):
        SharedTable.create(n, (2,), init=[1, 2, 3])
    with pytest.raises(TypeError, match="needs a shape"):
        SharedTable.create(n)
    assert not _exists(n)


def test_state_errors(table):
    with pytest.raises(KeyError, match=r"has no state 'exp_avg'; it has \['sum'\]"):
        table.state("exp_avg")


def test_unlink_and_remove(table):
    other = SharedTable.attach(table.name)
    table.unlink()
    assert not _exists(table.name)
    table.numpy()[0, 0] = 3.0
    assert other.numpy()[0, 0] == 3.0
    other.close()
    assert SharedTable.remove(table.name) is False


_LEAVER = textwrap.dedent(
    """
    import sys
    from pscore.hogwild import SharedTable
    a = SharedTable.create(sys.argv[1] + "-a", (64, 4))
    b = SharedTable.create(sys.argv[1] + "-b", (8,), optimizer="adam")
    c = SharedTable.attach(sys.argv[1] + "-a")
    view = a.numpy()  # views alive at exit must not keep the segment either
    b.close()
    print("done")
    """
)


def test_no_leftovers_after_a_clean_exit_without_close():
    base = _name("exit")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, "-c", _LEAVER, base],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"
    assert not _exists(base + "-a") and not _exists(base + "-b")


def test_a_name_left_by_a_killed_process_is_reclaimed():
    base = _name("killed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    code = (
        "import os, signal, sys; from pscore.hogwild import SharedTable; "
        "t = SharedTable.create(sys.argv[1], (4,)); os.kill(os.getpid(), signal.SIGKILL)"
    )
    out = subprocess.run([sys.executable, "-c", code, base], check=False, env=env, timeout=60)
    assert out.returncode == -9
    assert _exists(base)  # nobody could clean up after SIGKILL...
    with SharedTable.create(base, (4,)) as t:  # ...but the next create takes the name over
        assert t.is_creator
    assert not _exists(base)
