"""The one request-authority policy: a pure decision over what a request shows.

Each route declares a :class:`Requirement`. :func:`decide` takes the facts of one
request (:class:`RequestFacts`, read from the ASGI scope by the guard) and answers the
:class:`Caller` it may act as, or the :class:`Refusal` it gets, with a sentence saying
how to get access. In order:

1. A request the operator listener admitted (its bearer and scope already checked) acts
   as the operator gateway; the browser checks do not apply to a bearer credential.
2. ``Host`` must name this node (DNS rebinding): else 421.
3. A body on a route that takes JSON must say ``application/json`` (a web page can send
   ``text/plain`` without a CORS preflight; this closes that door): else 415.
4. A cross-site ``Origin`` on anything but a safe method, and on every WebSocket, is
   refused (CSRF), unless it is one of this node's own origins (one of its names on the
   port the request arrived on) or a configured CORS origin. No address class is
   exempt: a page on another LAN machine, or on another port of this one, is another
   site.
5. The route's requirement; then the optional API keys, required from every caller that
   is not on this machine.

The store port (``store/transport.py``) applies the same decision under its own
requirements (:data:`STORE_REQUIREMENTS`): there any ``Origin`` is refused, since no
browser belongs on it, and API keys do not apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from skulk_daemon.authority.peers import PeerClass


class Requirement(StrEnum):
    OPEN = "open"
    """Reads and inference: any caller that reaches the port (API keys, when configured,
    from callers not on this machine)."""
    TRUSTED_FABRIC = "trusted_fabric"
    """Mutations: a loopback or trusted-fabric (private LAN, CGNAT) socket peer with no
    proxy headers, or the operator gateway."""
    DIRECT_LOOPBACK = "direct_loopback"
    """What changes where secrets go or what the node trusts: a loopback socket peer
    with no proxy headers, or the operator gateway."""
    PAIRING = "pairing"
    """``/v1/auth/*``: the pairing authority (pre-auth, bearer, direct owner) is applied
    by the routes themselves; the browser checks still apply."""
    STORE_PEER = "store_peer"
    """The store port (``model_store.store_port``): the cluster's nodes, a loopback or
    trusted-fabric socket peer with no proxy headers. No browser: any ``Origin`` is
    refused. API keys do not apply (they guard the API port, not the fabric)."""
    STORE_LOOPBACK = "store_loopback"
    """The store port's imports: a loopback socket peer, no proxy headers, no browser."""


STORE_REQUIREMENTS: Final = frozenset({Requirement.STORE_PEER, Requirement.STORE_LOOPBACK})


class Caller(StrEnum):
    """What an admitted request may act as; services read it for finer rules."""

    LOOPBACK = "loopback"
    TRUSTED_FABRIC = "trusted_fabric"
    OPERATOR = "operator"
    SERVICE_BEARER = "service_bearer"
    OTHER = "other"


SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestFacts:
    method: str
    peer: PeerClass
    forwarded: str | None
    """The first proxy-forwarding header the request carries."""
    host: str | None
    """The ``Host`` header's host, ``None`` when missing, repeated or malformed."""
    host_is_own: bool
    origin: str | None
    """The ``Origin`` header as sent (``None`` when absent)."""
    origin_is_own: bool = False
    """The origin is one of this node's names on the port the request arrived on."""
    origin_class: PeerClass = PeerClass.UNKNOWN
    origin_allowed: bool = False
    """The origin is one of the configured CORS origins."""
    content_type: str | None = None
    """Media type only, lower-case (``application/json``)."""
    has_body: bool = False
    operator: bool = False
    api_keys_configured: bool = False
    api_key_valid: bool = False
    service_bearer: bool = False
    """The request presented the exact-card qualification token (and it matched)."""
    websocket: bool = False
    """A WebSocket handshake: a GET, yet it opens a two-way session, so a browser's
    cross-site ``Origin`` is refused as for a mutation."""


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class RouteAuthority:
    """What one route declares."""

    requirement: Requirement
    json_body: bool = True
    """The route's body, when it has one, is JSON."""
    service_bearer: bool = False
    """The exact-card qualification token is accepted here (add-card and its cleanup)."""
    untyped_json: bool = False
    """A JSON body sent without a JSON Content-Type is taken too, from a caller with no
    ``Origin`` (Ollama's routes: its server ignores Content-Type, so ``curl -d`` works)."""


UNTYPED_JSON_TYPES: Final = frozenset({None, "application/x-www-form-urlencoded", "text/plain"})
"""What ``curl -d`` (a form type) or a bare client sends a JSON body as."""


def is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


def _origin_ok(facts: RequestFacts) -> bool:
    return facts.origin is None or facts.origin_is_own or facts.origin_allowed


def _what(facts: RequestFacts) -> str:
    """How a refusal names the request: a read is not a change."""
    if facts.websocket:
        return "this connection"
    return "this read" if facts.method in SAFE_METHODS else "this change"


def decide(facts: RequestFacts, route: RouteAuthority) -> Caller | Refusal:
    """The caller this request acts as, or why it is refused."""
    if facts.operator:
        return Caller.OPERATOR
    if facts.host is None or not facts.host_is_own:
        return Refusal(
            421,
            "misdirected_host",
            "the request's Host header does not name this node; address it by its IP "
            "address, hostname or localhost, or add the name you use to api.hostnames "
            "in skulk.yaml",
        )
    store = route.requirement in STORE_REQUIREMENTS
    json_expected = facts.method in BODY_METHODS and facts.has_body and route.json_body
    # NOTE: the store port also takes a body with no Content-Type at all (its clients
    # are nodes and scripts): a page can send one without a preflight, but never
    # without an Origin on a POST or DELETE, and the store port refuses every Origin.
    untyped_ok = store and facts.content_type is None
    # NOTE: the JSON Content-Type check is a CSRF defence: a page may send a text/plain,
    # form or untyped body cross-site without a preflight. Every browser puts an Origin
    # on such a POST, so a route that takes untyped JSON takes it only without one:
    # curl and scripts, never a page.
    if route.untyped_json and facts.origin is None:
        untyped_ok = untyped_ok or facts.content_type in UNTYPED_JSON_TYPES
    if json_expected and not is_json(facts.content_type) and not untyped_ok:
        return Refusal(
            415,
            "unsupported_media_type",
            "this route takes a JSON body: send it with Content-Type: application/json",
        )
    if store and facts.origin is not None:
        return Refusal(
            403,
            "cross_origin",
            "the store port serves the cluster's nodes, never a web page (the request "
            "carries an Origin)",
        )
    if (facts.method not in SAFE_METHODS or facts.websocket) and not _origin_ok(facts):
        return Refusal(
            403,
            "cross_origin",
            "this request comes from a web page on another site (its Origin is not this "
            "node); open the page this node serves, or add its origin to api.cors_origins "
            "in skulk.yaml",
        )
    if route.service_bearer and facts.service_bearer:
        return Caller.SERVICE_BEARER
    caller = _caller(facts)
    refusal = _required(facts, route.requirement, caller)
    if refusal is not None:
        return refusal
    remote = facts.peer is not PeerClass.LOOPBACK
    if facts.api_keys_configured and remote and not facts.api_key_valid and not store:
        return Refusal(
            401,
            "invalid_api_key",
            "this node requires an API key from callers on other machines: send "
            "'Authorization: Bearer <key>' with one of the keys in api.keys "
            "(SKULK_API_KEYS)",
        )
    return caller


def _caller(facts: RequestFacts) -> Caller:
    if facts.forwarded is not None:
        return Caller.OTHER
    if facts.peer is PeerClass.LOOPBACK:
        return Caller.LOOPBACK
    if facts.peer.trusted_fabric:
        return Caller.TRUSTED_FABRIC
    return Caller.OTHER


def _required(facts: RequestFacts, requirement: Requirement, caller: Caller) -> Refusal | None:
    match requirement:
        case Requirement.OPEN | Requirement.PAIRING:
            return None
        case Requirement.STORE_PEER:
            if facts.forwarded is not None:
                return _forwarded(facts.forwarded)
            if caller in (Caller.LOOPBACK, Caller.TRUSTED_FABRIC):
                return None
            return Refusal(
                403,
                "untrusted_peer",
                "the store port serves this cluster's nodes only (this machine, the "
                "private LAN or CGNAT peers)",
            )
        case Requirement.STORE_LOOPBACK:
            if facts.forwarded is not None:
                return _forwarded(facts.forwarded)
            if caller is not Caller.LOOPBACK:
                return Refusal(
                    403,
                    "loopback_required",
                    "imports are accepted from this machine (loopback) only",
                )
            return None
        case Requirement.TRUSTED_FABRIC:
            if facts.forwarded is not None:
                return _forwarded(facts.forwarded)
            if caller in (Caller.LOOPBACK, Caller.TRUSTED_FABRIC):
                return None
            return Refusal(
                403,
                "untrusted_peer",
                f"{_what(facts)} is accepted only from this machine, the node's private "
                "network (LAN or CGNAT addresses; a caller on a public address is not "
                "trusted), or a paired device through the operator gateway (skulk "
                "operator pair)",
            )
        case Requirement.DIRECT_LOOPBACK:
            if facts.forwarded is not None:
                return _forwarded(facts.forwarded)
            if caller is not Caller.LOOPBACK:
                return Refusal(
                    403,
                    "loopback_required",
                    f"{_what(facts)} is accepted only from this machine (localhost) or from "
                    "a paired device through the operator gateway (skulk operator pair)",
                )
            if facts.origin is not None and facts.origin_class is not PeerClass.LOOPBACK:
                return Refusal(
                    403,
                    "cross_origin",
                    "this change is accepted only from a page this node serves on "
                    "localhost; the request's Origin names another site",
                )
            return None


def _forwarded(header: str) -> Refusal:
    return Refusal(
        403,
        "forwarded_request",
        f"the request carries the proxy header {header}; this change needs a direct "
        "connection to the node (or a paired device through the operator gateway)",
    )
