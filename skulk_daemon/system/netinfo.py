"""The node's preferred address, as ``/node/identity`` reports it."""

from __future__ import annotations

import ipaddress
import socket

import psutil


def preferred_ipv4() -> str:
    """A non-loopback, non-link-local IPv4 address, private ranges first; else the hostname."""
    candidates: list[ipaddress.IPv4Address] = []
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family != socket.AF_INET:
                continue
            try:
                ip = ipaddress.IPv4Address(address.address)
            except ValueError:
                continue
            if ip.is_loopback or ip.is_link_local or ip.is_unspecified:
                continue
            candidates.append(ip)
    if not candidates:
        return socket.gethostname()
    candidates.sort(key=lambda ip: (not ip.is_private, int(ip)))
    return str(candidates[0])
