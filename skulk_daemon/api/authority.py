"""The Litestar guard that applies :func:`~skulk_daemon.authority.policy.decide` to
every route, and counts what it refuses.

Each route handler's merged ``opt`` carries :data:`AUTHORITY_OPT` (a
:class:`~skulk_daemon.authority.policy.RouteAuthority`, or a bare ``Requirement``);
controllers set a default for their routes and mutations override it. A route with no
declaration is refused outright (and the route-table test fails first).
"""

from __future__ import annotations

import hmac
import os
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Final

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from skulk_core.config import SkulkConfig
from skulk_daemon.authority.hosts import OwnNames
from skulk_daemon.authority.peers import (
    classify,
    classify_name,
    forwarding_header,
    origin_host,
    origin_port,
    split_host,
)
from skulk_daemon.authority.policy import (
    Caller,
    Refusal,
    RequestFacts,
    Requirement,
    RouteAuthority,
    decide,
)
from skulk_daemon.errors import ApiError
from skulk_daemon.operator.guards import operator_caller

AUTHORITY_OPT: Final = "authority"
"""The ``opt`` key a route declares its authority under."""
CALLER_STATE_KEY: Final = "skulk.caller"
"""Where the admitted :class:`Caller` is left in the request's scope state."""
SERVICE_TOKEN_ENV: Final = "SKULK_EXACT_CARD_QUALIFICATION_TOKEN"
API_KEYS_ENV: Final = "SKULK_API_KEYS"
MIN_SERVICE_TOKEN_CHARS: Final = 32
"""A shorter qualification token is ignored: the spec asks for a high-entropy value."""


def declare(
    requirement: Requirement, *, service_bearer: bool = False, json_body: bool = True
) -> dict[str, RouteAuthority]:
    """The ``opt`` a controller or route handler declares its authority with."""
    return {
        AUTHORITY_OPT: RouteAuthority(
            requirement, json_body=json_body, service_bearer=service_bearer
        )
    }


TRUSTED_CALLERS: Final = frozenset({Caller.LOOPBACK, Caller.TRUSTED_FABRIC, Caller.OPERATOR})
"""Callers a trusted-fabric route admits; reads show them what they show no one else."""


def route_authority(handler: BaseRouteHandler) -> RouteAuthority | None:
    """What ``handler`` declared (through its layers' merged ``opt``), if anything."""
    declared = handler.opt.get(AUTHORITY_OPT)
    if isinstance(declared, RouteAuthority):
        return declared
    if isinstance(declared, Requirement):
        return RouteAuthority(declared)
    return None


def caller_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Caller:
    """What the guard admitted this request as (``OTHER`` if it never ran)."""
    caller = connection.scope.get("state", {}).get(CALLER_STATE_KEY)
    return caller if isinstance(caller, Caller) else Caller.OTHER


def _headers(connection: ASGIConnection[Any, Any, Any, Any]) -> list[tuple[str, str]]:
    raw: Iterable[tuple[bytes, bytes]] = connection.scope.get("headers", [])
    return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw]


def _values(headers: list[tuple[str, str]], name: str) -> list[str]:
    return [value for key, value in headers if key == name]


def _presented_secrets(headers: list[tuple[str, str]]) -> list[str]:
    """Credentials a client may send an API key in: OpenAI's ``Authorization: Bearer``,
    Anthropic's ``x-api-key``."""
    found = [value.strip() for value in _values(headers, "x-api-key")]
    for value in _values(headers, "authorization"):
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            found.append(token.strip())
    return found


def _matches(presented: list[str], secrets: Iterable[str]) -> bool:
    # NOTE: every pair is compared (no early exit on the first miss), in constant time.
    hit = False
    for secret in secrets:
        for value in presented:
            hit |= hmac.compare_digest(value.encode(), secret.encode())
    return hit


class AuthorityGuard:
    """Applies the policy to each request; ``refusals`` counts them by reason."""

    def __init__(
        self,
        config: Callable[[], SkulkConfig],
        *,
        own_names: OwnNames | None = None,
        environ: Callable[[str], str | None] = os.environ.get,
    ) -> None:
        self._config = config
        self._names = own_names or OwnNames()
        # NOTE: the environment is read once; skulk.yaml's keys are read live.
        self._env_keys = tuple(
            k.strip() for k in (environ(API_KEYS_ENV) or "").split(",") if k.strip()
        )
        token = (environ(SERVICE_TOKEN_ENV) or "").strip()
        self._service_token = token if len(token) >= MIN_SERVICE_TOKEN_CHARS else None
        self.refusals: Counter[str] = Counter()

    def api_keys(self) -> tuple[str, ...]:
        return tuple(k for k in self._config().api.keys if k) + self._env_keys

    def facts(self, connection: ASGIConnection[Any, Any, Any, Any]) -> RequestFacts:
        scope = connection.scope
        headers = _headers(connection)
        config = self._config()
        names = config.api.hostnames
        hosts = _values(headers, "host")
        host = split_host(hosts[0]) if len(hosts) == 1 else None
        origins = _values(headers, "origin")
        origin = origins[0].strip() if origins else None
        named = origin_host(origin) if origin is not None else None
        client = scope.get("client")
        content_type = connection.headers.get("content-type")
        lengths = _values(headers, "content-length")
        has_body = bool(_values(headers, "transfer-encoding")) or any(
            value.strip() not in ("", "0") for value in lengths
        )
        keys = self.api_keys()
        presented = _presented_secrets(headers)
        token = self._service_token
        return RequestFacts(
            method=str(scope.get("method", "GET")).upper(),
            peer=classify(client[0] if client else None),
            forwarded=forwarding_header([name for name, _ in headers]),
            host=host,
            host_is_own=host is not None and self._names.is_own(host, names),
            origin=origin,
            origin_is_own=named is not None
            and self._names.is_own(named, names)
            and _same_port(origin, scope),
            origin_class=classify_name(named),
            origin_allowed=origin is not None
            and origin.lower().rstrip("/")
            in {o.lower().rstrip("/") for o in config.api.cors_origins},
            content_type=content_type.split(";", 1)[0].strip().lower() if content_type else None,
            has_body=has_body,
            operator=operator_caller(scope) is not None,
            api_keys_configured=bool(keys),
            api_key_valid=bool(keys) and _matches(presented, keys),
            service_bearer=token is not None and _matches(presented, [token]),
            websocket=str(scope.get("type")) == "websocket",
        )

    def __call__(
        self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
    ) -> None:
        route = route_authority(handler)
        if route is None:
            self._refuse(Refusal(403, "undeclared_route", "this route declares no authority"))
        assert route is not None
        outcome = decide(self.facts(connection), route)
        if isinstance(outcome, Refusal):
            self._refuse(outcome)
        else:
            connection.scope.setdefault("state", {})[CALLER_STATE_KEY] = outcome

    def _refuse(self, refusal: Refusal) -> None:
        self.refusals[refusal.code] += 1
        headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None
        raise ApiError(refusal.status, refusal.message, code=refusal.code, headers=headers)


def _same_port(origin: str | None, scope: Any) -> bool:
    """Whether ``origin`` names the port this request arrived on: a page this node
    serves has exactly that origin, while another port on the same host (any local
    web server) is another site."""
    server = scope.get("server")
    if origin is None or not server or len(server) < 2 or server[1] is None:
        return False
    return origin_port(origin) == int(server[1])
