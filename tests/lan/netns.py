"""A LAN of machines on this one: a Linux bridge and N network namespaces on it.

Each namespace is one machine with its own network stack (so every daemon in it uses
the default ports), loopback up, one veth leg on the bridge and an address on a private
subnet of its own (``10.231.T.0/24``, ``T`` from the test process's pid and free on this
machine, so parallel runs do not clash). The host side of the bridge has ``.1`` on the
subnet, so the test process reaches each machine at its address. Each machine has a
multicast route on its leg, so mDNS (``224.0.0.251``) crosses the bridge, and no
default route: nothing it sends can be routed off this machine.

This kernel has no ``netem``: a partition is a machine's veth leg taken down
(:meth:`Machine.disconnect`), a vanished network its leg deleted (:meth:`Machine.unplug`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

FIRST_HOST = 10
"""Machine ``i`` gets ``10.231.T.(FIRST_HOST + i)``."""
MULTICAST = "224.0.0.0/4"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _ip_quiet(*args: str) -> None:
    """Best effort (removing what may not be there)."""
    subprocess.run(["ip", *args], check=False, capture_output=True)


@dataclass(frozen=True)
class Machine:
    """One namespace on the bridge: ``address`` on ``eth0``, ``leg`` its bridge port."""

    namespace: str
    address: str
    leg: str

    def disconnect(self) -> None:
        """Cut the machine off the LAN (its cable pulled: no carrier, addresses kept)."""
        _ip("link", "set", self.leg, "down")

    def reconnect(self) -> None:
        _ip("link", "set", self.leg, "up")
        # The route survives a lost carrier; replace it in case the kernel dropped it.
        _ip("-n", self.namespace, "route", "replace", MULTICAST, "dev", "eth0")

    def unplug(self) -> None:
        """Remove the machine's network card for good (the veth pair is deleted)."""
        _ip_quiet("link", "del", self.leg)


@dataclass(frozen=True)
class Lan:
    bridge: str
    gateway: str
    machines: tuple[Machine, ...]


def _tag() -> str:
    return f"{os.getpid() % 100000}"


def _free_subnet() -> str:
    """``10.231.T`` with ``T`` from the pid, moved on past any this machine already has."""
    taken = subprocess.run(["ip", "-4", "-o", "addr"], check=True, capture_output=True, text=True)
    for step in range(250):
        subnet = f"10.231.{(os.getpid() + step) % 250 + 1}"
        if f" {subnet}." not in taken.stdout:
            return subnet
    raise RuntimeError("no free 10.231.T.0/24 subnet for the namespaced LAN")


@contextmanager
def lan(count: int) -> Iterator[Lan]:
    """``count`` machines on one bridge, removed afterwards whatever happened."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag = _tag()
    subnet = _free_subnet()
    gateway = f"{subnet}.1"
    bridge = f"skbr{tag}"
    namespaces: list[str] = []
    legs: list[str] = []
    # What a killed run with a recycled pid left behind would clash with.
    for i in range(count):
        _ip_quiet("link", "del", f"skv{tag}h{i}")
        _ip_quiet("netns", "del", f"skulk-lan-{tag}-{i}")
    _ip_quiet("link", "del", bridge)
    try:
        _ip("link", "add", bridge, "type", "bridge")
        # No snooping: every multicast frame (mDNS) floods to every port, querier or not.
        _ip("link", "set", bridge, "type", "bridge", "mcast_snooping", "0")
        _ip("addr", "add", f"{gateway}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        machines = []
        for i in range(count):
            namespace, leg, card = f"skulk-lan-{tag}-{i}", f"skv{tag}h{i}", f"skv{tag}n{i}"
            address = f"{subnet}.{FIRST_HOST + i}"
            _ip("netns", "add", namespace)
            namespaces.append(namespace)
            _ip("link", "add", leg, "type", "veth", "peer", "name", card)
            legs.append(leg)
            _ip("link", "set", card, "netns", namespace)
            _ip("-n", namespace, "link", "set", card, "name", "eth0")
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("link", "set", leg, "master", bridge)
            _ip("link", "set", leg, "up")
            _ip("-n", namespace, "route", "add", MULTICAST, "dev", "eth0")
            machines.append(Machine(namespace, address, leg))
        yield Lan(bridge, gateway, tuple(machines))
    finally:
        for leg in legs:
            _ip_quiet("link", "del", leg)
        for namespace in namespaces:
            _ip_quiet("netns", "del", namespace)
        _ip_quiet("link", "del", bridge)
