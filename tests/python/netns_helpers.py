"""Hosts for multi-host tests: network namespaces, each with its own address on one link.

Every host is a namespace whose `eth0` is a veth pair's end; the other ends are ports of a bridge
in a namespace of its own (the switch), so nothing is added to the test machine's own network
and deleting the namespaces removes every device. Named hosts (a pod, a Slurm node) also run
their commands under their own hostname (a UTS namespace) and see an /etc/hosts mapping every
host's names (a Service's DNS names too) to its address: `ip netns exec` bind-mounts
/etc/netns/<ns>/hosts over /etc/hosts, so every process keeps the port its scheduler gives it
and reaches the others by the names the scheduler uses. Needs root and iproute2; the fixtures
skip cleanly where namespaces cannot be made (no root, no `ip`, a sandbox that forbids them)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

__all__ = ["Host", "hosts", "hosts_fixture", "in_host", "named_hosts"]

DEVICE = "eth0"  # each host's end of the link


def in_host(namespace: str, hostname: str, argv: list[str]) -> list[str]:
    """`argv` run in network namespace `namespace` under its own `hostname`."""
    return [
        "ip", "netns", "exec", namespace, "unshare", "--uts",
        "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *argv,
    ]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Host:
    namespace: str
    addr: str
    name: str | None = None  # its hostname, for named hosts

    def command(self, *argv: str) -> list[str]:
        """`argv` run inside this host's namespace (under its hostname, when named)."""
        if self.name is not None:
            return in_host(self.namespace, self.name, list(argv))
        return ["ip", "netns", "exec", self.namespace, *argv]

    def set_link(self, up: bool) -> None:
        """Plugs this host into the link (up) or cuts it off (down)."""
        _ip("-n", self.namespace, "link", "set", DEVICE, "up" if up else "down")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _delete(namespaces: list[str]) -> None:
    for ns in namespaces:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False, timeout=30)
        shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)


def _write_hosts_files(made: list[Host], aliases: dict[str, list[str]]) -> None:
    if not any(h.name for h in made):
        return
    lines = ["127.0.0.1 localhost"]
    lines += [f"{h.addr} {' '.join([h.name, *aliases[h.name]])}" for h in made if h.name]
    for h in made:
        os.makedirs(f"/etc/netns/{h.namespace}", exist_ok=True)
        with open(f"/etc/netns/{h.namespace}/hosts", "w") as f:
            f.write("\n".join(lines) + "\n")


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
    with _hosts([None] * count, {}, subnet) as made:
        yield made


@contextlib.contextmanager
def named_hosts(names: dict[str, list[str]], subnet: str = "10.87.0") -> Iterator[dict[str, Host]]:
    """A host per name (its aliases, e.g. a Service's DNS names, map to it too), by name; each
    runs its commands under its own hostname. pytest.skip where they cannot be made."""
    if not shutil.which("unshare"):
        pytest.skip("needs unshare for a hostname per host")
    with _hosts(list(names), names, subnet) as made:
        yield {h.name: h for h in made if h.name is not None}


@contextlib.contextmanager
def _hosts(
    names: list[str | None], aliases: dict[str, list[str]], subnet: str
) -> Iterator[list[Host]]:
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 for network namespaces")
    tag = uuid.uuid4().hex[:6]
    switch = f"psc{tag}sw"
    made = [Host(f"psc{tag}h{i}", f"{subnet}.{i + 1}", n) for i, n in enumerate(names)]
    namespaces = [switch] + [h.namespace for h in made]
    try:
        try:
            _ip("netns", "add", switch)
            _build(switch, made)
            _write_hosts_files(made, aliases)
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
