"""pscore._config: every PSCORE_* variable declared once and read only there; docs/config.md
matches it; malformed values fail naming the variable; one default job id everywhere."""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import pscore
from pscore import _C, _config
from pscore.collectives import group, rendezvous
from pscore.ps import PSClient
from pscore.ps.server import PServer

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "pscore"
# Where the pscore under test was imported from (the tree, or site-packages when installed).
IMPORTED_FROM = str(pathlib.Path(pscore.__file__).resolve().parents[1])
VARIABLE = re.compile(r"PSCORE_[A-Z0-9_]+")


def _parents(tree: ast.AST) -> dict:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _is_write(node: ast.AST, parents: dict) -> bool:
    """A name used as the key of an assignment (env["PSCORE_X"] = ...): setting a child's
    environment is not reading it."""
    while isinstance(parents.get(node), (ast.BinOp, ast.JoinedStr)):
        node = parents[node]
    parent = parents.get(node)
    return isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store)


def variable_reads(source: str) -> list[str]:
    """PSCORE_* names a Python file uses other than as an assignment target: a whole string
    constant that is a variable's name, or a string built from "PSCORE_" (f"PSCORE_{x}")."""
    tree = ast.parse(source)
    parents = _parents(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if isinstance(parents.get(node), ast.JoinedStr):
                continue  # judged as part of its f-string below
            built = isinstance(parents.get(node), ast.BinOp) and node.value == "PSCORE_"
            if (VARIABLE.fullmatch(node.value) or built) and not _is_write(node, parents):
                found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            text = head.value if isinstance(head, ast.Constant) else ""
            if text.startswith("PSCORE_") and " " not in text and not _is_write(node, parents):
                found.append(f"line {node.lineno}: f-string {ast.unparse(node)}")
    return found


def test_the_checker_finds_every_way_of_reading_a_variable():
    reads = variable_reads(
        "import os\n"
        "a = os.environ.get('PSCORE_TIMEOUT', '1')\n"
        "b = os.environ['PSCORE_HOST']\n"
        "c = 'PSCORE_STORE' in os.environ\n"
        "d = os.getenv('PSCORE_JOB_ID')\n"
        "e = os.environ.get(f'PSCORE_{name}')\n"
        "f = os.environ['PSCORE_' + name]\n"
        "env['PSCORE_RANK'] = '0'\n"  # a write: allowed
        "env['PSCORE_' + name] = '0'\n"  # a write: allowed
        "help = 'default: $PSCORE_JOB_ID, else pscore'\n"  # prose: allowed
    )
    assert [r.split(":")[0] for r in reads] == [f"line {n}" for n in range(2, 8)], reads


def test_only_config_reads_pscore_variables():
    offenders = {}
    sources = [PACKAGE, ROOT / "examples", ROOT / "benchmarks"]
    for path in sorted(p for d in sources for p in d.rglob("*.py")):
        if path.name == "_config.py":
            continue
        reads = variable_reads(path.read_text())
        if reads:
            offenders[str(path.relative_to(ROOT))] = reads
    assert not offenders, f"read PSCORE_* through pscore._config instead: {offenders}"


def test_every_variable_the_cpp_core_reads_is_declared_with_its_reader():
    declared = {v.name: v for v in _config.VARIABLES}
    readers = set()
    for path in sorted((ROOT / "csrc").rglob("*")):
        if path.suffix not in (".h", ".cc", ".cu", ".cuh"):
            continue
        text = path.read_text()
        rel = str(path.relative_to(ROOT))
        if "getenv(" in text:
            readers.add(rel)
        for name in re.findall(r'"(PSCORE_[A-Z0-9_]+)"', text):
            assert name in declared, f"{rel} names {name}, which pscore._config does not declare"
            assert declared[name].read_by, f"{rel} reads {name}; mark it read_by in _config"
    named = {v.read_by for v in _config.VARIABLES if v.read_by}
    assert readers == named, f"C++ files calling getenv {readers} != read_by files {named}"


def test_docs_config_md_is_generated_from_config():
    on_disk = (ROOT / "docs" / "config.md").read_text()
    assert on_disk == _config.markdown(), (
        "regenerate it with pscore._config.markdown() (see its header)"
    )
    for v in _config.VARIABLES:
        assert f"`{v.name}`" in on_disk


@pytest.mark.parametrize(
    ("name", "value", "read", "message"),
    [
        ("PSCORE_TIMEOUT", "abc", lambda: group.timeout_seconds(None), "a number of seconds"),
        ("PSCORE_TIMEOUT", "-5", lambda: group.timeout_seconds(None), "a number of seconds"),
        ("PSCORE_SMALL_ALLREDUCE_BYTES", "64q", group.tuning_from_env, "a number of bytes"),
        ("PSCORE_SMALL_ALLREDUCE_BYTES", "-4K", group.tuning_from_env, "a number of bytes"),
        ("PSCORE_LARGE_BROADCAST_BYTES", "1.5", group.tuning_from_env, "a number of bytes"),
        ("PSCORE_TRANSPORT", "udp", _config.TRANSPORT.get, "auto, tcp, shm"),
        ("PSCORE_RANK", "one", pscore.discover, "not an integer"),
    ],
)
def test_a_malformed_value_names_the_variable(monkeypatch, name, value, read, message):
    monkeypatch.setenv(name, value)
    if name == "PSCORE_RANK":
        monkeypatch.setenv("PSCORE_WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=rf"{name}='?{re.escape(value)}'?.*{message}"):
        read()


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("4096", 4096), (" 64k ", 64 << 10), ("1M", 1 << 20), ("2GB", 2 << 30), ("0", 0)],
)
def test_byte_sizes_take_binary_suffixes(text, nbytes):
    assert _config.parse_bytes(text) == nbytes


def test_values_parse_and_blank_means_the_default(monkeypatch):
    monkeypatch.setenv("PSCORE_TIMEOUT", "2.5")
    monkeypatch.setenv("PSCORE_SMALL_ALLREDUCE_BYTES", " 256 ")
    monkeypatch.setenv("PSCORE_LARGE_BROADCAST_BYTES", "")
    monkeypatch.setenv("PSCORE_HOST", "10.1.2.3")
    monkeypatch.setenv("PSCORE_ALLREDUCE_ALGORITHM", "Halving_Doubling")
    monkeypatch.setenv("PSCORE_REDUCE_SCATTER_ALGORITHM", "ring")
    monkeypatch.delenv("PSCORE_YIELD_US", raising=False)
    monkeypatch.delenv("PSCORE_SPIN_US", raising=False)
    assert group.timeout_seconds(None) == 2.5
    assert group.tuning_from_env() == {
        "small_allreduce_bytes": 256,
        "allreduce_algorithm": _C.AllreduceAlgorithm.HALVING_DOUBLING,
        "large_broadcast_bytes": -1,  # unset: the core decides (never while ranks take turns)
        "allgather_algorithm": _C.AllgatherAlgorithm.AUTO,
        "reduce_scatter_algorithm": _C.ReduceScatterAlgorithm.RING,
        "spin_us": -1,  # unset: the core decides (poll only when ranks fit on the cores)
        "yield_us": -1,  # unset: the core decides (yield only when ranks outnumber cores)
    }
    monkeypatch.setenv("PSCORE_YIELD_US", "0")
    monkeypatch.setenv("PSCORE_SPIN_US", "300")
    monkeypatch.setenv("PSCORE_LARGE_BROADCAST_BYTES", "1M")
    assert group.tuning_from_env()["large_broadcast_bytes"] == 1 << 20
    assert group.tuning_from_env()["yield_us"] == 0
    assert group.tuning_from_env()["spin_us"] == 300
    assert rendezvous.advertised_host("10.9.9.9") == "10.1.2.3"
    assert _config.TRANSPORT.get({"PSCORE_TRANSPORT": "TCP"}) == "tcp"
    assert _config.JOB_ID.get({}) == "pscore"


def test_a_bad_hogwild_isa_fails_at_import_naming_the_variable():
    env = {"PSCORE_HOGWILD_ISA": "sse9", "PYTHONPATH": IMPORTED_FROM}
    proc = subprocess.run(
        [sys.executable, "-c", "import pscore"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "PSCORE_HOGWILD_ISA='sse9': expected one of avx2, baseline" in proc.stderr


def test_the_hogwild_isa_variable_picks_the_kernels():
    code = "import pscore.hogwild as h; print(h.kernel_isa())"
    env = {"PSCORE_HOGWILD_ISA": "baseline", "PYTHONPATH": IMPORTED_FROM}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "baseline", proc.stderr


def test_the_parameter_server_defaults_to_the_same_job_id_as_the_store(monkeypatch):
    """PSCORE_JOB_ID unset: PServer and PSClient use "pscore", as the stores and the transports
    do (they used "" before), so a client naming job "pscore" joins a default server."""
    monkeypatch.delenv("PSCORE_JOB_ID", raising=False)
    with PServer(num_workers=1, log_connections=False) as server:
        client = PSClient([server.address], job_id="pscore")
        client.create_dense("t", (3,))
        np.testing.assert_array_equal(client.pull("t"), np.zeros(3, np.float32))
        client.close()
        with pytest.raises(pscore.Error, match=r"job id .* is not this server's"):
            PSClient([server.address], job_id="", connect_timeout=5)


def test_the_parameter_server_reads_the_token_file_like_the_store(monkeypatch, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    monkeypatch.delenv("PSCORE_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("PSCORE_AUTH_TOKEN_FILE", str(token_file))
    assert _config.auth_token() == "s3cret"
    with PServer(num_workers=1, log_connections=False) as server:
        client = PSClient([server.address])  # the token from the file too
        client.create_dense("t", (2,))
        client.close()
        with pytest.raises(pscore.Error):
            PSClient([server.address], auth_token="wrong", connect_timeout=5)
    monkeypatch.setenv("PSCORE_AUTH_TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"PSCORE_AUTH_TOKEN_FILE=.*missing: cannot read"):
        _config.auth_token()
