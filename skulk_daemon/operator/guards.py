"""Who may use what: the operator listener's bearer guard and the direct-owner guard.

Two authorities reach the same Litestar app:

- the **operator listener** (loopback TLS, what the relay connects to) admits a request
  only with ``Authorization: Bearer <access token>`` holding the scope
  :func:`skulk_core.operator.scopes.required_scope` names; the three pre-auth routes
  (challenge, exchange, token) pass without one. :class:`OperatorGate` enforces it in
  front of the app and marks every request it admits, so no handler ever treats a
  relayed request as the host's owner;
- the **direct owner** (the dashboard opened on the gateway host) manages invitations
  and devices on the main port without a credential, but only from a loopback socket
  peer, with a loopback ``Host``, an exact same-origin ``Origin``/``Referer`` when the
  browser sends one, the ``X-Skulk-Dashboard: pairing-v1`` marker and no proxy
  forwarding header. Every refusal is a 403 saying what to change.

A supplied bearer never falls back to direct authority: once ``Authorization`` is
present, only the bearer rules apply.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import msgspec
from litestar.types import ASGIApp, Receive, Scope, Send

from skulk_core.operator.scopes import DIRECT_OWNER_ONLY, required_scope
from skulk_daemon.errors import NO_STORE_HEADERS, ApiError, error_body
from skulk_daemon.operator.errors import AuthorityError, NotGateway, authority_api_error
from skulk_daemon.operator.results import DeviceGrant
from skulk_daemon.operator.service import OperatorPairingService

DASHBOARD_HEADER: Final = "x-skulk-dashboard"
DASHBOARD_MARKER: Final = "pairing-v1"
# Headers a reverse proxy adds; any of them means the socket peer is not the client.
FORWARDING_HEADERS: Final = frozenset({"forwarded", "x-real-ip"})
FORWARDING_PREFIX: Final = "x-forwarded-"
# Tailscale's address spaces: a peer there could only be trusted after the local
# Tailscale authority verified it, and this node has no such verifier.
TAILSCALE_NETWORKS: Final = (
    ipaddress.ip_network("100.64.0.0/10"),
    ipaddress.ip_network("fd7a:115c:a1e0::/48"),
)
# RFC 6750 b64token, bounded: opaque tokens are 43 characters; anything far longer is
# not one of ours and is refused before it reaches the store.
MAX_BEARER_CHARS: Final = 512
_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([A-Za-z0-9\-._~+/]+=*)")
# The scope state key under which OperatorGate marks the requests it admitted.
OPERATOR_CALLER_KEY: Final = "skulk.operator_caller"


@dataclass(frozen=True, slots=True)
class OperatorCaller:
    """A request the operator listener admitted; ``grant`` is ``None`` only on the
    pre-auth routes."""

    grant: DeviceGrant | None


def operator_caller(scope: Scope) -> OperatorCaller | None:
    """The operator listener's mark on this request, ``None`` on the main port."""
    caller = scope.get("state", {}).get(OPERATOR_CALLER_KEY)
    return caller if isinstance(caller, OperatorCaller) else None


def _header_values(scope: Scope, name: str) -> list[str]:
    raw_name = name.encode("latin-1")
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", [])
    return [value.decode("latin-1") for key, value in headers if key.lower() == raw_name]


# bearer ----------------------------------------------------------------------------------


def _unauthorized(message: str, code: str = "invalid_bearer") -> ApiError:
    return ApiError(
        401, message, code=code, headers={**NO_STORE_HEADERS, "WWW-Authenticate": "Bearer"}
    )


def bearer_token(scope: Scope) -> str | None:
    """The bearer access token, ``None`` when no ``Authorization`` header was sent.

    A header that is present but not exactly one well-formed ``Bearer`` credential is
    a 401 (never a reason to try another authority).
    """
    values = _header_values(scope, "authorization")
    if not values:
        return None
    if len(values) > 1:
        raise _unauthorized("send exactly one Authorization header")
    value = values[0].strip()
    match = _BEARER.fullmatch(value)
    if match is None or len(match.group(1)) > MAX_BEARER_CHARS:
        raise _unauthorized("the Authorization header must be 'Bearer <access token>'")
    return match.group(1)


async def authorize_bearer(
    service: OperatorPairingService | None, token: str, scope_needed: str
) -> DeviceGrant:
    """The device behind ``token`` if it holds ``scope_needed``: else 401 or 403."""
    if service is None:
        raise _unauthorized("this node has no operator authority; the credential is unknown")
    try:
        # NOTE: in a worker thread: authenticating reads (and may decrypt) the store.
        grant = await asyncio.to_thread(service.authenticate, token)
    except NotGateway:
        raise _unauthorized("the access token is not valid on this node") from None
    except AuthorityError as exc:
        raise authority_api_error(exc) from None
    if scope_needed not in grant.scopes:
        raise ApiError(
            403,
            f"this device's credential lacks the {scope_needed} scope this route needs; "
            f"the gateway owner can grant it to device {grant.device_id}",
            code="insufficient_scope",
            headers=dict(NO_STORE_HEADERS),
        )
    return grant


def _direct_owner_only() -> ApiError:
    return ApiError(
        403,
        "this route is only available to the gateway's owner through the dashboard opened "
        "on the gateway host (http://localhost), never through the operator listener, "
        "even with a fully scoped device credential",
        code="direct_owner_only",
        headers=dict(NO_STORE_HEADERS),
    )


# direct owner ----------------------------------------------------------------------------


def _forbidden(message: str, code: str) -> ApiError:
    return ApiError(403, message, code=code, headers=dict(NO_STORE_HEADERS))


def _dashboard_url(scope: Scope) -> str:
    server = scope.get("server")
    port = server[1] if server and server[1] else None
    return f"http://localhost:{port}" if port else "http://localhost"


def _loopback_host(host: str) -> bool:
    """Whether a ``Host`` header names this machine's loopback (port optional)."""
    host = host.strip().lower()
    if host.startswith("["):
        name, sep, rest = host[1:].partition("]")
        if not sep or (rest and not re.fullmatch(r":\d{1,5}", rest)):
            return False
    else:
        name, _, port = host.partition(":")
        if port and not port.isdigit():
            return False
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def peer_kind(host: str | None) -> str:
    """``loopback``, ``tailscale`` (unverifiable here) or ``other`` for a socket peer."""
    if not host:
        return "other"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "other"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "loopback"
    if any(address in network for network in TAILSCALE_NETWORKS):
        return "tailscale"
    return "other"


def check_direct_owner(scope: Scope) -> None:
    """Raise the actionable 403 unless this is the dashboard on the gateway host."""
    url = _dashboard_url(scope)
    if operator_caller(scope) is not None:
        raise _direct_owner_only()
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", [])
    for key, _ in headers:
        name = key.decode("latin-1").lower()
        if name in FORWARDING_HEADERS or name.startswith(FORWARDING_PREFIX):
            raise _forbidden(
                f"the request carries the proxy header {name}; direct dashboard authority "
                f"needs a direct connection: open the dashboard at {url} on the gateway "
                "host instead of through a proxy",
                "forwarded_request",
            )
    client = scope.get("client")
    peer = client[0] if client else None
    kind = peer_kind(peer)
    if kind == "tailscale":
        raise _forbidden(
            f"the request came from the Tailscale address {peer}, which this node cannot "
            f"verify with a local Tailscale authority; open the dashboard at {url} on the "
            "gateway host, or use a paired device's credential",
            "unverified_peer",
        )
    if kind != "loopback":
        raise _forbidden(
            f"the request came from {peer or 'an unknown peer'}, not from this host; "
            f"open the dashboard at {url} on the gateway host, or use a paired device's "
            "credential",
            "untrusted_peer",
        )
    hosts = _header_values(scope, "host")
    if len(hosts) != 1 or not _loopback_host(hosts[0]):
        raise _forbidden(
            "the request's Host is not a loopback name; open the dashboard as "
            f"{url} or http://127.0.0.1 on the gateway host",
            "untrusted_host",
        )
    own_origin = f"{scope.get('scheme', 'http')}://{hosts[0].strip()}".lower()
    origins = _header_values(scope, "origin")
    if len(origins) > 1 or (origins and origins[0].strip().lower() != own_origin):
        raise _forbidden(
            f"the request's Origin is not this dashboard's own origin ({own_origin}); "
            "send it from the dashboard page this node serves",
            "cross_origin",
        )
    referers = _header_values(scope, "referer")
    if len(referers) > 1 or (referers and _origin_of(referers[0]) != own_origin):
        raise _forbidden(
            f"the request's Referer is not a page of this dashboard ({own_origin}); "
            "send it from the dashboard page this node serves",
            "cross_origin",
        )
    markers = _header_values(scope, DASHBOARD_HEADER)
    if [marker.strip() for marker in markers] != [DASHBOARD_MARKER]:
        raise _forbidden(
            f"add the header 'X-Skulk-Dashboard: {DASHBOARD_MARKER}' (the dashboard sends "
            "it) to use direct owner authority, or send a paired device's bearer credential",
            "dashboard_header_required",
        )


def _origin_of(url: str) -> str | None:
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc or "@" in parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


# the operator listener's gate ----------------------------------------------------------


class OperatorGate:
    """ASGI wrapper the operator listener serves: bearer and scope before the app.

    Pre-auth routes pass unauthenticated; every other request needs a valid bearer with
    the route's scope. Admitted requests carry :class:`OperatorCaller` in their scope
    state, which is how handlers tell the operator listener from the main port.
    """

    def __init__(self, app: ASGIApp, service: OperatorPairingService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind: Any = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "GET") if kind == "http" else "GET"
        needed = required_scope(str(method), scope["path"])
        try:
            if needed is None:
                caller = OperatorCaller(grant=None)
            elif needed == DIRECT_OWNER_ONLY:
                raise _direct_owner_only()
            else:
                token = bearer_token(scope)
                if token is None:
                    raise _unauthorized(
                        "the operator listener needs 'Authorization: Bearer <access token>' "
                        "from a paired device",
                        code="missing_bearer",
                    )
                caller = OperatorCaller(grant=await authorize_bearer(self.service, token, needed))
        except ApiError as refusal:
            await _refuse(scope, send, refusal)
            return
        scope["state"] = {**scope.get("state", {}), OPERATOR_CALLER_KEY: caller}
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, send: Send, refusal: ApiError) -> None:
    kind: Any = scope["type"]
    if kind == "websocket":
        # Closing before accepting makes the server answer the handshake with 403.
        await send({"type": "websocket.close", "code": 1008, "reason": ""})
        return
    body = msgspec.json.encode(error_body(refusal.message, refusal.type, refusal.code))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in refusal.headers.items()),
    ]
    await send({"type": "http.response.start", "status": refusal.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
