"""Who a request comes from: the socket peer's class, proxy headers, the browser Origin.

The trust classes are the spec's: *loopback* (this machine), the *trusted fabric*
(a private-LAN or CGNAT peer: such a peer can already join the mesh as a full member),
and everyone else. Proxy-forwarding headers mean the socket peer is not the client, so
a forwarded request is never trusted for anything a direct peer would be.
"""

from __future__ import annotations

import ipaddress
from enum import StrEnum
from typing import Final
from urllib.parse import urlsplit

FORWARDING_HEADERS: Final = frozenset({"forwarded", "x-real-ip", "via"})
"""Headers a reverse proxy adds (with every ``x-forwarded-*``)."""
FORWARDING_PREFIX: Final = "x-forwarded-"

CGNAT: Final = ipaddress.ip_network("100.64.0.0/10")
_PRIVATE_LAN: Final = (
    ipaddress.ip_network("10.0.0.0/8"),
    ipaddress.ip_network("172.16.0.0/12"),
    ipaddress.ip_network("192.168.0.0/16"),
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fc00::/7"),
    ipaddress.ip_network("fe80::/10"),
)


class PeerClass(StrEnum):
    LOOPBACK = "loopback"
    PRIVATE_LAN = "private_lan"
    CGNAT = "cgnat"
    PUBLIC = "public"
    UNKNOWN = "unknown"

    @property
    def trusted_fabric(self) -> bool:
        """Loopback, or a network whose peers may already join the mesh."""
        return self in (PeerClass.LOOPBACK, PeerClass.PRIVATE_LAN, PeerClass.CGNAT)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def classify(host: str | None) -> PeerClass:
    """The trust class of an address (a socket peer's, or a literal in a URL)."""
    address = _address(host) if host else None
    if address is None:
        return PeerClass.UNKNOWN
    if address.is_loopback:
        return PeerClass.LOOPBACK
    if address in CGNAT:
        return PeerClass.CGNAT
    if any(address in network for network in _PRIVATE_LAN):
        return PeerClass.PRIVATE_LAN
    return PeerClass.PUBLIC


def classify_name(host: str | None) -> PeerClass:
    """:func:`classify` for a host that may be a name: ``localhost`` is loopback, any
    other name is unknown (it is not resolved)."""
    if host is not None and (host == "localhost" or host.endswith(".localhost")):
        return PeerClass.LOOPBACK
    return classify(host)


def forwarding_header(names: list[str]) -> str | None:
    """The first proxy-forwarding header among ``names`` (lower-case), if any."""
    for name in names:
        if name in FORWARDING_HEADERS or name.startswith(FORWARDING_PREFIX):
            return name
    return None


def split_host(value: str) -> str | None:
    """The host part of a ``Host`` header (no port, brackets kept off IPv6), lower-case;
    ``None`` when the header is malformed."""
    value = value.strip().lower()
    if not value or any(c.isspace() for c in value) or "@" in value or "/" in value:
        return None
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return name
    name, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return name.rstrip(".") or None


def origin_port(origin: str) -> int | None:
    """The port an ``Origin`` names (its scheme's default when it names none); ``None``
    for ``null`` or garbage."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https"):
        return None
    return port if port is not None else (443 if parts.scheme == "https" else 80)


def origin_host(origin: str) -> str | None:
    """The host an ``Origin`` (or ``Referer``) names; ``None`` for ``null`` or garbage."""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return None
    return parts.hostname.lower().rstrip(".")
