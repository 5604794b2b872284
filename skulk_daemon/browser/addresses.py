"""The SSRF policy: which addresses a browser tool may connect to.

A URL's host is resolved once, every address it resolves to is checked, and the
fetcher then connects to a checked address (see ``fetch.py``), so a DNS answer that
changes between the check and the connection (rebinding) cannot slip a private
address through.

A refusal names the address only when the caller spelled it out: what an internal
name resolves to is itself something a caller probing the LAN should not learn.
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
# IETF protocol assignments (RFC 6890). NOTE: listed explicitly because Python 3.11's
# ``ipaddress`` calls only 192.0.0.0/29 and 192.0.0.170/31 of it private and the rest
# (192.0.0.8, say) global. Newer Pythons exempt 192.0.0.9 and 192.0.0.10 (anycast
# relays), which serve no web pages either, so the whole block is refused.
_IETF_PROTOCOL_ASSIGNMENTS = ipaddress.IPv4Network("192.0.0.0/24")


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
    if address in _IETF_PROTOCOL_ASSIGNMENTS:
        return "an IETF protocol assignment address", True
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


def _numeric_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The address a numeric IPv4 spelling names (``2130706433``, ``127.1``, ``0x7f.1``).

    The resolver turns these into an address without asking DNS, so naming that
    address in a refusal tells the caller nothing it did not write itself.
    """
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
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
        hint = f"; {ALLOW_HINT}" if liftable else ""
        if literal is not None:
            raise AddressRefused(f"refused: {address} is {reason}{hint}")
        if _numeric_ipv4(host) == address:
            raise AddressRefused(f"refused: {host} resolves to {address}, {reason}{hint}")
        kind = "a non-public address" if liftable else "an address no setting allows"
        raise AddressRefused(f"refused: {host} resolves to {kind}{hint}")
    return addresses
