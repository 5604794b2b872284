"""The node's preferred address, as ``/node/identity`` reports it."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator

import psutil


def _ipv4_addresses() -> Iterator[ipaddress.IPv4Address]:
    """Every IPv4 address of every interface, in the order the system lists them."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family != socket.AF_INET:
                continue
            try:
                yield ipaddress.IPv4Address(address.address)
            except ValueError:
                continue


def preferred_ipv4() -> str:
    """A non-loopback, non-link-local IPv4 address, private ranges first; else the hostname."""
    candidates = [
        ip
        for ip in _ipv4_addresses()
        if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified)
    ]
    if not candidates:
        return socket.gethostname()
    candidates.sort(key=lambda ip: (not ip.is_private, int(ip)))
    return str(candidates[0])


def advertised_api_urls(host: str, port: int) -> tuple[str, ...]:
    """The URLs other nodes may reach this node's API on: every IPv4 address for a
    wildcard bind (private ranges first), else the bound host. Loopback is never told
    to other machines (it would name their own API): a wildcard bind advertises it only
    when the machine has no other address, so only members on this machine can use it."""
    if host not in ("0.0.0.0", "", "::"):
        return (f"http://{_url_host(host)}:{port}",)
    found: list[ipaddress.IPv4Address] = []
    for ip in _ipv4_addresses():
        if not (ip.is_link_local or ip.is_unspecified) and ip not in found:
            found.append(ip)
    routable = [ip for ip in found if not ip.is_loopback] or found
    routable.sort(key=lambda ip: (not ip.is_private, int(ip)))
    return tuple(f"http://{ip}:{port}" for ip in routable[:8])


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
