"""What ``GET /v1/plugins/host-network`` tells a plugin about this node's fabric.

Pure: the caller observes the live listeners and hands them here. This module owns
the answer's shape, the domain-separated ``namespaceFingerprint`` and the rule that
turns an observed listening socket into a numeric ``{host, port}`` a plugin on this
host can connect to.

The fingerprint is SHA-256 over UTF-8 ``skulk-host-attachment-v1`` + NUL + the
version/namespace token (``<namespace>/<networkVersion>``). The token is built from
the fabric's routing namespace and protocol version; neither the raw namespace nor
any key material is part of the answer, and the digest is never equal to the
routing namespace itself. Two nodes answer the same fingerprint exactly when they
route under the same namespace at the same protocol version.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable
from typing import Annotated, Final

import msgspec

ATTACHMENT_DOMAIN: Final = b"skulk-host-attachment-v1"
"""The domain separator: the fingerprint can never collide with another digest of
the same token made for some other purpose."""

MAX_ENDPOINTS: Final = 16
"""At most this many endpoints per list (a node has a few listening addresses)."""

Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]


class UnsupportedListener(ValueError):
    """An observed listener that cannot be reported as a numeric TCP endpoint."""


class Endpoint(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A numeric TCP endpoint on the serving host."""

    host: str
    """A numeric IPv4 or IPv6 address (never a name)."""
    port: Port


class HostNetwork(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """The answer of ``GET /v1/plugins/host-network``."""

    node_id: str
    network_version: str
    namespace_fingerprint: str
    control_endpoints: tuple[Endpoint, ...]
    data_transport: str
    data_endpoints: tuple[Endpoint, ...]


def namespace_token(namespace: str, network_version: str) -> str:
    """The version/namespace token the fingerprint is taken over."""
    if not namespace or not network_version:
        raise ValueError("the routing namespace and network version are both required")
    if "\x00" in namespace or "\x00" in network_version:
        raise ValueError("the routing namespace and network version cannot contain NUL")
    return f"{namespace}/{network_version}"


def namespace_fingerprint(token: str) -> str:
    """SHA-256 hex of UTF-8 ``skulk-host-attachment-v1`` + NUL + ``token``."""
    return hashlib.sha256(ATTACHMENT_DOMAIN + b"\x00" + token.encode("utf-8")).hexdigest()


def local_endpoint(host: str, port: int) -> Endpoint:
    """The endpoint a listener bound to ``host``:``port`` is connectable on from this
    host: its numeric address, or loopback of the same family for a wildcard bind
    (``0.0.0.0`` or ``::``). Raises :class:`UnsupportedListener` for anything else."""
    if not 0 < port < 65536:
        raise UnsupportedListener(f"the listener has no TCP port (got {port})")
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        raise UnsupportedListener("the listener is not bound to a numeric address") from None
    if address.is_unspecified:
        loopback = "::1" if address.version == 6 else "127.0.0.1"
        return Endpoint(host=loopback, port=port)
    return Endpoint(host=address.compressed, port=port)


def endpoints(listening: Iterable[tuple[str, int]]) -> tuple[Endpoint, ...]:
    """Observed ``(host, port)`` listeners as distinct numeric endpoints, IPv4 first,
    at most :data:`MAX_ENDPOINTS`. Raises :class:`UnsupportedListener` when none is
    usable."""
    found = {local_endpoint(host, port) for host, port in listening}
    if not found:
        raise UnsupportedListener("no TCP listener is running")
    ordered = sorted(found, key=lambda e: (":" in e.host, e.host, e.port))
    return tuple(ordered[:MAX_ENDPOINTS])


def host_network(
    *,
    node_id: str,
    namespace: str,
    network_version: str,
    control: Iterable[tuple[str, int]],
    data_transport: str,
    data: Iterable[tuple[str, int]],
) -> HostNetwork:
    """The answer for one observation of the live listeners."""
    control_endpoints = endpoints(control)
    data_list = list(data)
    return HostNetwork(
        node_id=node_id,
        network_version=network_version,
        namespace_fingerprint=namespace_fingerprint(namespace_token(namespace, network_version)),
        control_endpoints=control_endpoints,
        data_transport=data_transport,
        data_endpoints=endpoints(data_list) if data_list else (),
    )
