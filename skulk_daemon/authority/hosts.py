"""The names this node answers to, for the ``Host`` check against DNS rebinding.

A page on ``evil.example`` whose DNS later answers with this node's address can make a
browser send it requests carrying ``Host: evil.example``; refusing any ``Host`` that
does not name this node takes that away. The names: loopback (``localhost``,
``*.localhost``, loopback literals), every address of this machine's interfaces, its
hostname with and without ``.local`` (mDNS), its fully qualified name, and the names
the operator configured (``api.hostnames``).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

import psutil

REFRESH_SECONDS: Final = 30.0
"""Interfaces come and go (DHCP, VPNs); the address list is read again this often."""
MISS_REFRESH_SECONDS: Final = 2.0
"""A name not found is looked for again in a fresh read, at most this often."""


def _interface_addresses() -> set[str]:
    found: set[str] = set()
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                text = address.address.split("%", 1)[0].lower()
                try:
                    found.add(str(ipaddress.ip_address(text)))
                except ValueError:
                    continue
    return found


def _host_names() -> set[str]:
    names = set()
    for raw in (socket.gethostname(), socket.getfqdn()):
        name = raw.strip().lower().rstrip(".")
        if name:
            names.add(name)
            short = name.split(".", 1)[0]
            names.update({short, f"{short}.local"})
    return names


@dataclass
class OwnNames:
    """This node's names and addresses, refreshed now and then."""

    configured: tuple[str, ...] = ()
    addresses: Callable[[], set[str]] = _interface_addresses
    hostnames: Callable[[], set[str]] = _host_names
    clock: Callable[[], float] = time.monotonic
    _names: frozenset[str] = field(default=frozenset(), init=False)
    _read_at: float | None = field(default=None, init=False)

    def names(self, *, max_age: float = REFRESH_SECONDS) -> frozenset[str]:
        now = self.clock()
        if self._read_at is None or now - self._read_at >= max_age:
            self._names = frozenset({*self.hostnames(), *self.addresses()})
            self._read_at = now
        return self._names

    def is_own(self, host: str, configured: Iterable[str] = ()) -> bool:
        """Whether ``host`` (a bare host, as :func:`~skulk_daemon.authority.peers.split_host`
        gives it) names this node; ``configured`` are the operator's names right now
        (``api.hostnames``, read live, so a config change applies at once)."""
        if host in _lower((*self.configured, *configured)):
            return True
        if host == "localhost" or host.endswith(".localhost"):
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return self._known(host)
        if address.is_loopback:
            return True
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return self._known(str(address))

    def _known(self, name: str) -> bool:
        # A miss may be an address that just appeared (a new interface, a DHCP lease).
        return name in self.names() or name in self.names(max_age=MISS_REFRESH_SECONDS)


def _lower(names: Iterable[str]) -> set[str]:
    return {name.strip().lower().rstrip(".") for name in names if name.strip()}
