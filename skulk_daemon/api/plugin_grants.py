"""``/v1/auth/plugin-grants``: the direct owner lists and replaces each paired device's
explicit plugin scopes (``skulk_daemon/operator/plugin_grants.py`` owns the rule).

Direct owner only: the operator listener (relay) and any presented ``Authorization``
header are refused with 403, even with the dashboard's headers, so a paired device can
never grant itself more; then the dashboard boundary (``check_direct_owner``). Unknown
devices 404, a stale ``expectedRevision`` 409, malformed grants 422. No credential
material is returned; ``Cache-Control: no-store``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, ParamSpec, TypeVar

import msgspec
from litestar import Controller, get, put
from litestar.datastructures import ResponseHeader

from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.errors import NO_STORE_EXCEPTION_HANDLERS
from skulk_daemon.api.openapi import documented
from skulk_daemon.api.plugin_authority import (
    CHANGE_ERRORS,
    HOW_PLUGINS_ARE_MANAGED,
    READ_ERRORS,
    decode_body,
    fail,
)
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import NO_STORE_HEADERS, ApiError
from skulk_daemon.operator.errors import AuthorityError, NotGateway, authority_api_error
from skulk_daemon.operator.guards import check_direct_owner, operator_caller
from skulk_daemon.operator.plugin_grants import PluginGrant, PluginGrants
from skulk_daemon.operator.service import OperatorPairingService

P = ParamSpec("P")
T = TypeVar("T")


class GrantsBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    expected_revision: Annotated[int, msgspec.Meta(ge=0)] = msgspec.field(name="expectedRevision")
    scopes: Annotated[list[str], msgspec.Meta(max_length=3)]


def _grants_owner(request: HttpRequest) -> None:
    """Direct owner only: the operator listener, and any presented ``Authorization``
    (even with the dashboard's headers), are refused; a device never grants itself."""
    presented = any(key.lower() == b"authorization" for key, _ in request.scope["headers"])
    if operator_caller(request.scope) is not None or presented:
        fail(
            403,
            "plugin grants are changed only with direct owner access: in a browser on the "
            'node or over Tailscale choose "Use direct host access"; an API client sends '
            "the request without the credential",
            "direct_owner_only",
        )
    try:
        check_direct_owner(request.scope)
    except ApiError as refused:
        fail(403, f"{refused.message}; {HOW_PLUGINS_ARE_MANAGED}", refused.code)


def _gateway(authority: OperatorPairingService | None) -> OperatorPairingService:
    if authority is None:
        fail(409, "this node is not the operator gateway: it has no paired devices", "not_gateway")
    return authority


async def _grants_call(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except NotGateway:
        fail(409, "this node is not the operator gateway: it has no paired devices", "not_gateway")
    except AuthorityError as exc:
        raise authority_api_error(exc) from None


class PluginGrantsController(Controller):
    path = "/v1/auth/plugin-grants"
    tags = ("Operator authentication",)
    opt = declare(Requirement.PAIRING)
    request_max_body_size = 4096
    response_headers = tuple(ResponseHeader(name=k, value=v) for k, v in NO_STORE_HEADERS.items())
    exception_handlers = NO_STORE_EXCEPTION_HANDLERS

    @get("/", summary="Paired devices' plugin grants (direct owner only)", responses=READ_ERRORS)
    async def grants(
        self, request: HttpRequest, authority: OperatorPairingService | None
    ) -> PluginGrants:
        _grants_owner(request)
        rows = await _grants_call(_gateway(authority).plugin_grants)
        return PluginGrants(devices=rows)

    @put(
        "/{device_id:str}",
        summary="Replace one device's plugin grants (direct owner only)",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=GrantsBody),
    )
    async def replace(
        self,
        request: HttpRequest,
        authority: OperatorPairingService | None,
        device_id: str,
    ) -> PluginGrant:
        _grants_owner(request)
        body = decode_body(await request.body(), GrantsBody)
        return await _grants_call(
            _gateway(authority).set_plugin_grants, device_id, body.expected_revision, body.scopes
        )
