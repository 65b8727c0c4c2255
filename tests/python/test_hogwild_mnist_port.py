"""PyTorch's mnist_hogwild, ported (examples/mnist_hogwild_port.py: an MLP on scikit-learn's
digits, SGD(lr=0.01, momentum=0.5), 2 processes started with torch.multiprocessing.Process and
passed the model), reaches the accuracy of torch's own Hogwild version of the same script, run
in the same test on the same seeds."""

from __future__ import annotations

import importlib.util
import pathlib
import statistics

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

SEEDS = (1, 2, 3)
# Measured here (docs/hogwild.md): over 10 seeds at 5 epochs torch's version scores 0.51-0.76
# (mean 0.643) and the port 0.51-0.74 (mean 0.640); the port minus torch on the same seed is
# -0.018 to +0.031 (sd 0.015), so the mean of 3 seeds differs by far less than this margin.
# Without momentum (what the port could express before) the port scores 0.42-0.45.
MARGIN = 0.04


def _port():
    path = pathlib.Path(__file__).parents[2] / "examples" / "mnist_hogwild_port.py"
    spec = importlib.util.spec_from_file_location("mnist_hogwild_port", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_port_reaches_torchs_hogwild_accuracy_with_sgd_momentum():
    port = _port()
    accuracy = {"torch": [], "pscore": []}
    for seed in SEEDS:
        args = port.parser().parse_args(["--epochs", "5", "--seed", str(seed)])
        for impl, scores in accuracy.items():
            scores.append(port.run(impl, args))
    ours, theirs = statistics.mean(accuracy["pscore"]), statistics.mean(accuracy["torch"])
    assert ours >= theirs - MARGIN, accuracy
