"""Hosts for multi-host tests: network namespaces, each with its own address on one link.

Every host is a namespace whose `eth0` is a veth pair's end; the other ends are ports of a bridge
in a namespace of its own (the switch), so nothing is added to the test machine's own network
and deleting the namespaces removes every device. Needs root and iproute2; the fixture skips
cleanly where namespaces cannot be made (no root, no `ip`, a sandbox that forbids them)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

__all__ = ["Host", "hosts", "hosts_fixture"]

DEVICE = "eth0"  # each host's end of the link


@dataclasses.dataclass(frozen=True)
class Host:
    namespace: str
    addr: str

    def command(self, *argv: str) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def set_link(self, up: bool) -> None:
        """Plugs this host into the link (up) or cuts it off (down)."""
        _ip("-n", self.namespace, "link", "set", DEVICE, "up" if up else "down")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _delete(namespaces: list[str]) -> None:
    for ns in namespaces:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False, timeout=30)


def _build(switch: str, made: list[Host]) -> None:
    """The switch's bridge, then each host's namespace, address and port on the bridge."""
    _ip("-n", switch, "link", "add", "br0", "type", "bridge")
    _ip("-n", switch, "link", "set", "br0", "up")
    for i, host in enumerate(made):
        _ip("netns", "add", host.namespace)
        port = f"port{i}"
        _ip("-n", switch, "link", "add", port, "type", "veth", "peer", "name", DEVICE,
            "netns", host.namespace)  # fmt: skip
        _ip("-n", switch, "link", "set", port, "master", "br0", "up")
        _ip("-n", host.namespace, "addr", "add", f"{host.addr}/24", "dev", DEVICE)
        _ip("-n", host.namespace, "link", "set", DEVICE, "up")
        _ip("-n", host.namespace, "link", "set", "lo", "up")


@contextlib.contextmanager
def hosts(count: int, subnet: str = "10.77.0") -> Iterator[list[Host]]:
    """`count` hosts with addresses subnet.1, subnet.2, ... on one link; pytest.skip where
    network namespaces cannot be made. Every namespace is deleted on the way out."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 for network namespaces")
    tag = uuid.uuid4().hex[:6]
    switch = f"psc{tag}sw"
    made = [Host(f"psc{tag}h{i}", f"{subnet}.{i + 1}") for i in range(count)]
    namespaces = [switch] + [h.namespace for h in made]
    try:
        try:
            _ip("netns", "add", switch)
            _build(switch, made)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
            detail = getattr(e, "stderr", b"") or b""
            pytest.skip(f"network namespaces unavailable here: {e} {detail.decode().strip()}")
        yield made
    finally:
        _delete(namespaces)


def hosts_fixture(count: int, subnet: str = "10.77.0"):
    """A module-scoped pytest fixture giving `count` hosts (see hosts())."""

    @pytest.fixture(scope="module")
    def fixture() -> Iterator[list[Host]]:
        with hosts(count, subnet) as made:
            yield made

    return fixture
