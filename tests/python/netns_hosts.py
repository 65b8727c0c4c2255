"""Hosts for deployment tests: one network namespace per host (a pod, a Slurm node), each with
its own address on a shared bridge, its own hostname (a UTS namespace) and an /etc/hosts that
maps every host's names to its address (`ip netns exec` bind-mounts /etc/netns/<ns>/hosts over
/etc/hosts), so every process keeps the port its scheduler gives it and reaches the others by
the names the scheduler uses. Needs root and iproute2 (`unavailable()` says why not; a kernel
or sandbox that refuses the namespaces raises `Unavailable` from `Hosts(...).open()`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

__all__ = ["Hosts", "Unavailable", "in_host", "unavailable"]

SUBNET = "10.87.0"  # every host's address is SUBNET.<n>; the namespaces are the test's own


def unavailable() -> str | None:
    """Why these hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    for tool in ("ip", "unshare", "hostname"):
        if not shutil.which(tool):
            return f"needs {tool}"
    return None


def in_host(netns: str, hostname: str, argv: list[str]) -> list[str]:
    """`argv` run in network namespace `netns` under its own `hostname`."""
    return [
        "ip", "netns", "exec", netns, "unshare", "--uts",
        "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *argv,
    ]  # fmt: skip


class Unavailable(RuntimeError):
    """The namespaces, the bridge or the veth pairs could not be made here."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise Unavailable(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Hosts:
    """Hosts by name (each with aliases, e.g. a Service's DNS names); ``open()`` makes them,
    ``close()`` removes them. ``netns[name]``, ``address[name]``, ``argv(name, argv)``."""

    def __init__(self, names: dict[str, list[str]]):
        tag = uuid.uuid4().hex[:6]
        self.names = names
        self.hub = f"pschub{tag}"
        self.netns = {name: f"psc{tag}{i}" for i, name in enumerate(names)}
        self.address = {name: f"{SUBNET}.{i + 1}" for i, name in enumerate(names)}

    def open(self) -> Hosts:
        """Makes the hosts (Unavailable when this machine refuses); returns self."""
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for ns in [*self.netns.values(), self.hub]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)

    def argv(self, name: str, argv: list[str]) -> list[str]:
        return in_host(self.netns[name], name, argv)

    def _make(self) -> None:
        _ip("netns", "add", self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        lines = ["127.0.0.1 localhost"]
        lines += [
            f"{self.address[n]} {' '.join([n, *aliases])}" for n, aliases in self.names.items()
        ]
        for i, name in enumerate(self.names):
            ns = self.netns[name]
            _ip("netns", "add", ns)
            veth = ("type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.hub, "link", "add", f"v{i}", *veth)
            _ip("-n", self.hub, "link", "set", f"v{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.address[name]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write("\n".join(lines) + "\n")
