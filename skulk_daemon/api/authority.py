"""The Litestar guard that applies :func:`~skulk_daemon.authority.policy.decide` to
every route, and counts what it refuses.

Each route handler's merged ``opt`` carries :data:`AUTHORITY_OPT` (a
:class:`~skulk_daemon.authority.policy.RouteAuthority`, or a bare ``Requirement``);
controllers set a default for their routes and mutations override it. A route with no
declaration is refused outright (and the route-table test fails first).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Final, TypeVar

from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.handlers.base import BaseRouteHandler

from skulk_core.config import SkulkConfig
from skulk_daemon.authority.facts import request_facts
from skulk_daemon.authority.hosts import OwnNames
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
    requirement: Requirement,
    *,
    service_bearer: bool = False,
    json_body: bool = True,
    untyped_json: bool = False,
) -> dict[str, RouteAuthority]:
    """The ``opt`` a controller or route handler declares its authority with."""
    return {
        AUTHORITY_OPT: RouteAuthority(
            requirement,
            json_body=json_body,
            service_bearer=service_bearer,
            untyped_json=untyped_json,
        )
    }


HandlerT = TypeVar("HandlerT", bound=BaseRouteHandler)
"""The route handler a connection is for (an HTTP or a WebSocket one): the guard and
:func:`caller_of` read any connection on this app, which has no auth middleware."""

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


def caller_of(connection: ASGIConnection[HandlerT, None, None, State]) -> Caller:
    """What the guard admitted this request as (``OTHER`` if it never ran)."""
    caller = connection.scope.get("state", {}).get(CALLER_STATE_KEY)
    return caller if isinstance(caller, Caller) else Caller.OTHER


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

    def facts(self, connection: ASGIConnection[HandlerT, None, None, State]) -> RequestFacts:
        return request_facts(
            connection.scope,
            config=self._config(),
            names=self._names,
            api_keys=self.api_keys(),
            service_token=self._service_token,
            operator=operator_caller(connection.scope) is not None,
        )

    def __call__(
        self, connection: ASGIConnection[HandlerT, None, None, State], handler: BaseRouteHandler
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
