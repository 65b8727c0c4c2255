"""Starting and stopping for real: hello-worlds under pscore-run (rank 0, which hosts the store,
leaving as soon as it can), and interpreter exit while Python threads are inside pscore calls.
Each is repeated, since what it guards against is a race."""

from __future__ import annotations

import sys

import pytest
from exit_helpers import pscore_run, run_clean, write_script

HELLO = """
    import pscore
    pscore.init_process_group()
    pscore.destroy_process_group()
"""


def test_hello_world_under_pscore_run(tmp_path):
    script = write_script(tmp_path, "hello.py", HELLO)
    for _ in range(10):
        pscore_run(script, 3, tmp_path)


LEAVE_AFTER_NEW_GROUP = """
    import os
    import numpy as np
    import pscore
    pscore.init_process_group()
    group = pscore.new_group([1, 2])
    if pscore.get_rank() == 0:
        os._exit(0)  # the store's host leaves at once, without a word to anyone
    x = np.ones(3, np.int64)
    pscore.all_reduce(x, group=group)
    assert x.tolist() == [2, 2, 2], x
"""


def test_store_host_leaves_right_after_a_group_it_is_not_in(tmp_path):
    script = write_script(tmp_path, "leave.py", LEAVE_AFTER_NEW_GROUP)
    for _ in range(5):
        pscore_run(script, 3, tmp_path)


TORCH_HELLO = """
    import torch.distributed as dist
    import pscore.torch_backend
    dist.init_process_group("pscore")
    dist.destroy_process_group()
"""


def test_torch_backend_hello_world_under_pscore_run(tmp_path):
    pytest.importorskip("torch")
    script = write_script(tmp_path, "torch_hello.py", TORCH_HELLO)
    for _ in range(3):
        pscore_run(script, 3, tmp_path)


# Rank 0's script ends while a callback on a future is running on the torch backend's
# completer thread (inside torch's Future.set_result), which used to abort the process at exit.
TORCH_EXIT_DURING_A_CALLBACK = """
    import threading, time
    import torch
    import torch.distributed as dist
    import pscore.torch_backend

    dist.init_process_group("pscore")
    t = torch.zeros(4)
    if dist.get_rank() == 1:
        time.sleep(0.3)  # rank 0 has registered its callback by then
        dist.send(torch.ones(4), dst=0)
    else:
        running = threading.Event()

        def slow(fut):
            running.set()
            time.sleep(0.3)
            return fut.value()

        dist.irecv(t, src=1).get_future().then(slow)
        assert running.wait(30)
"""


def test_torch_backend_exit_during_a_future_callback(tmp_path):
    pytest.importorskip("torch")
    script = write_script(tmp_path, "callback.py", TORCH_EXIT_DURING_A_CALLBACK)
    for _ in range(2):
        pscore_run(script, 2, tmp_path)


# Daemon threads that keep calling into pscore while the main thread exits: at exit CPython ends
# such a thread when it takes the GIL back, which used to abort the process ("terminate called
# without an active exception"). One thread per kind of call: one that returns, one that
# raises, and a collective's wait.
DAEMONS_AT_EXIT = """
    import threading, time
    import numpy as np
    import pscore

    store = pscore.HashStore()
    pscore.init_process_group()  # a world of one
    x = np.ones(1024, np.float32)

    def returns():
        while True:
            store.set("key", "value")

    def raises():
        while True:
            try:
                store.wait(["never-set"], 0.001)
            except pscore.TimeoutError:
                pass

    def collective():
        while True:
            pscore.all_reduce(x, async_op=True).wait()

    for target in (returns, raises, collective):
        threading.Thread(target=target, daemon=True).start()
    time.sleep(0.05)
"""


def test_exit_while_daemon_threads_are_in_pscore_calls(tmp_path):
    script = write_script(tmp_path, "daemons.py", DAEMONS_AT_EXIT)
    for _ in range(10):
        run_clean([sys.executable, script], tmp_path, timeout=60)
