"""Who may call a plugin route, and the request as its handler reads it.

Every plugin route (``plugins.py``, ``plugin_releases.py``, ``plugin_nodes.py``, and the
plugin reads of ``host_network.py``) admits the direct owner (loopback dashboard
boundary, no proxy headers, ``X-Skulk-Dashboard: pairing-v1``), or a paired bearer
holding the scope the route names with :func:`needs` (``plugins:read`` for reads,
``plugins:manage`` for changes, ``plugins:approve`` for approvals), presented to the
operator listener or on the direct transport; a route that names no scope is direct
owner only (a presented credential is told to drop it). Pairing never grants a plugin
scope, and ``operations:write`` does not imply one.

A handler takes one :class:`PluginCaller` (the ``caller`` dependency): the rule already
applied, the authenticated actor, and the body read with the plugin routes' refusals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NoReturn, TypeVar

import msgspec
from litestar import get, post
from litestar.di import Provide
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import Operation

from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openapi import OPENAI, documented, errors
from skulk_daemon.errors import NO_STORE_HEADERS, ApiError
from skulk_daemon.operator.guards import (
    authorize_bearer,
    bearer_token,
    check_direct_owner,
    operator_caller,
)
from skulk_daemon.operator.plugin_grants import PLUGINS_READ
from skulk_daemon.operator.service import OperatorPairingService

T = TypeVar("T")


MAX_PLUGIN_BODY_BYTES: Final = 16 * 1024
READ_ERRORS: Final = errors(OPENAI, 404, 422, 429, 503, 504)
CHANGE_ERRORS: Final = errors(OPENAI, 404, 409, 422, 429, 503, 504)
SCOPE_OPT: Final = "plugin_scope"

HOW_PLUGINS_ARE_MANAGED: Final = (
    "plugins are managed from a browser on this node (http://localhost) or over Tailscale "
    "by its MagicDNS name or Tailscale IP"
)


def fail(status: int, message: str, code: str) -> NoReturn:
    raise ApiError(status, message, code=code, headers=dict(NO_STORE_HEADERS))


def decode_body(raw: bytes, kind: type[T]) -> T:
    try:
        return msgspec.json.decode(raw or b"null", type=kind)
    except msgspec.ValidationError as exc:
        fail(422, f"invalid request: {exc}", "invalid_request")
    except msgspec.DecodeError:
        fail(422, "the body is not one JSON object", "invalid_json")


def needs(scope: str | None) -> dict[str, str | None]:
    """A plugin route's ``opt``: the scope a paired bearer needs (``None``: the direct
    owner only)."""
    return {SCOPE_OPT: scope}


def reads(
    path: str,
    *,
    summary: str,
    responses: dict[int, ResponseSpec] = READ_ERRORS,
    scope: str = PLUGINS_READ,
) -> get:
    """A plugin read: ``GET``, admitted to ``scope`` (``plugins:read``)."""
    return get(path, summary=summary, responses=responses, opt=needs(scope))


def changes(
    path: str,
    *,
    summary: str,
    scope: str | None,
    body: type[msgspec.Struct] | None = None,
    request_max_body_size: int = MAX_PLUGIN_BODY_BYTES,
) -> post:
    """A plugin change: ``POST`` answered with 200, admitted to ``scope`` (``None``: the
    direct owner only), whose handler decodes ``body`` itself (documented here)."""
    return post(
        path,
        status_code=200,
        summary=summary,
        responses=CHANGE_ERRORS,
        operation_class=Operation if body is None else documented(body=body),
        request_max_body_size=request_max_body_size,
        opt=needs(scope),
    )


async def authorize(
    request: HttpRequest, authority: OperatorPairingService | None, scope_needed: str | None
) -> str:
    """Direct owner, or a paired bearer holding ``scope_needed``; ``None`` means the
    route is direct-owner only. A presented credential never falls back to direct.
    Returns the authenticated actor: ``device:<id>`` for a paired device, ``owner`` for
    direct owner access (what a proposal action records as its operator)."""
    caller = operator_caller(request.scope)
    token = None if caller is not None else bearer_token(request.scope)
    if scope_needed is None and (caller is not None or token is not None):
        fail(
            403,
            "this change needs direct owner access: in a browser on the node or over "
            'Tailscale choose "Use direct host access"; an API client sends the request '
            "without the credential",
            "direct_owner_only",
        )
    if caller is not None:
        if caller.grant is None or scope_needed not in caller.grant.scopes:
            fail(
                403,
                f"this device's credential lacks the {scope_needed} scope; the owner grants "
                "plugin access separately (pairing never does)",
                "insufficient_scope",
            )
        return f"device:{caller.grant.device_id}"
    if token is not None:
        assert scope_needed is not None
        grant = await authorize_bearer(authority, token, scope_needed)
        return f"device:{grant.device_id}"
    try:
        check_direct_owner(request.scope)
    except ApiError as refused:
        granted = "" if scope_needed is None else ", or by a paired device granted plugin access"
        fail(403, f"{refused.message}; {HOW_PLUGINS_ARE_MANAGED}{granted}", refused.code)
    return "owner"


@dataclass(frozen=True, slots=True)
class PluginCaller:
    """One plugin request its route's rule admitted, and who made it."""

    actor: str
    request: HttpRequest
    authority: OperatorPairingService | None

    async def also_needs(self, scope: str) -> str:
        """Apply the rule again for ``scope`` (an action that turns out to need more)."""
        return await authorize(self.request, self.authority, scope)

    async def body(self, kind: type[T]) -> T:
        return decode_body(await self.request.body(), kind)

    async def no_body(
        self, message: str = "this route takes no body (or {})", code: str = "invalid_request"
    ) -> None:
        if (await self.request.body()).strip() not in (b"", b"{}"):
            fail(422, message, code)


async def _caller(request: HttpRequest, authority: OperatorPairingService | None) -> PluginCaller:
    scope = request.route_handler.opt[SCOPE_OPT]
    actor = await authorize(request, authority, scope)
    return PluginCaller(actor=actor, request=request, authority=authority)


CALLER: Final = Provide(_caller)
"""The ``caller`` dependency of every plugin controller."""
