"""The SSRF policy: which addresses a browser tool may connect to.

A URL's host is resolved once, every address it resolves to is checked, and the
fetcher then connects to a checked address (see ``fetch.py``), so a DNS answer that
changes between the check and the connection (rebinding) cannot slip a private
address through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence

from skulk_daemon.browser.errors import AddressRefused, UpstreamError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# ``(host, port) -> address strings``; tests swap in a fixed table.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

ALLOW_HINT = "set browser_tools.allow_private_addresses to allow LAN pages"

# NAT64's well-known prefix carries an IPv4 address in its last 32 bits; a NAT64
# gateway would connect to that IPv4 address, so that is the one to judge.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def refusal(address: IPAddress, *, allow_private: bool) -> tuple[str, bool] | None:
    """Why ``address`` may not be fetched, or ``None`` when it may.

    The reason reads after "is" ("a loopback address"); the flag says whether
    ``allow_private_addresses`` would lift it. Unspecified and multicast addresses
    are never a web page, so no setting lifts those.
    """
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        inner = refusal(embedded, allow_private=allow_private)
        if inner is not None:
            return f"mapped to {embedded}, {inner[0]}", inner[1]
        if isinstance(address, ipaddress.IPv6Address) and (
            address.ipv4_mapped is not None or address in _NAT64
        ):
            return None
    if address.is_unspecified:
        return "an unspecified address", False
    if address.is_multicast:
        return "a multicast address", False
    if allow_private:
        return None
    if address.is_loopback:
        return "a loopback address", True
    if address.is_link_local:
        return "a link-local address", True
    if address.is_reserved:
        return "a reserved address", True
    if address.is_private:
        return "a private address", True
    if not address.is_global:
        return "not a publicly routable address", True
    return None


def parse_literal(host: str) -> IPAddress | None:
    """The address when ``host`` is an IP literal (dotted IPv4 or IPv6), else ``None``."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


async def system_resolver(host: str, port: int) -> Sequence[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]


async def resolve_allowed(
    host: str, port: int, *, allow_private: bool, resolver: Resolver = system_resolver
) -> list[IPAddress]:
    """Every address ``host`` resolves to, all of them allowed, in resolver order.

    Raises :class:`AddressRefused` when any one is refused: a name that answers both a
    public and a private address is not safe to connect to.
    """
    literal = parse_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            found = await resolver(host, port)
        except OSError as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise UpstreamError(f"could not resolve {host}: {reason}") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(item) for item in found))
        if not addresses:
            raise UpstreamError(f"could not resolve {host}: no IPv4 or IPv6 address")
    for address in addresses:
        refused = refusal(address, allow_private=allow_private)
        if refused is None:
            continue
        reason, liftable = refused
        where = f"{address} is" if literal is not None else f"{host} resolves to {address},"
        hint = f"; {ALLOW_HINT}" if liftable else ""
        raise AddressRefused(f"refused: {where} {reason}{hint}")
    return addresses
