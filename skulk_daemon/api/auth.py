"""``/v1/auth/*``: device pairing, credential rotation, devices and dashboard invitations.

Handlers decode a bounded JSON body, check who is asking (the bearer, or the direct
owner for the dashboard routes; :mod:`skulk_daemon.operator.guards`), call one
:class:`~skulk_daemon.operator.service.OperatorPairingService` method in a worker thread
and return its Struct. Authority refusals map to HTTP in
:func:`skulk_daemon.operator.errors.authority_api_error`.

Secrets (nonces, signatures, tokens, the pairing code) travel only in bodies, never in a
URL, and every response here is ``Cache-Control: no-store``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, TypeVar, TypeVarTuple

import msgspec
from litestar import Controller, delete, get, post
from litestar.datastructures import ResponseHeader

from skulk_core.operator.scopes import DEVICES_MANAGE
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openapi import OPENAI, documented, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import NO_STORE_HEADERS, ApiError, decode_json
from skulk_daemon.operator.errors import AuthorityError, NotGateway, authority_api_error
from skulk_daemon.operator.guards import (
    authorize_bearer,
    bearer_token,
    check_direct_owner,
    operator_caller,
)
from skulk_daemon.operator.results import (
    ChallengeResult,
    DeviceStatus,
    ExchangeResult,
    InvitationStatus,
    TokenGrant,
)
from skulk_daemon.operator.service import OperatorPairingService

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# Pairing bodies are a few hundred bytes; anything past this is not a pairing request.
MAX_AUTH_BODY_BYTES: Final = 8 * 1024


class ChallengeRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    nonce: str
    device_name: str
    device_public_key: str
    invitation_id: str | None = None

    def __repr__(self) -> str:
        return "ChallengeRequest(...)"


class ExchangeRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    nonce: str
    signature: str
    invitation_id: str | None = None
    attempt_id: str | None = None

    def __repr__(self) -> str:
        return "ExchangeRequest(...)"


class TokenRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    device_id: str
    refresh_token: str

    def __repr__(self) -> str:
        return f"TokenRequest(device_id={self.device_id!r}, ...)"


class InvitationRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    valid_for_seconds: int
    max_pairings: int


class InvitationCreated(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Safe status plus the one secret: ``pairingCode``, the ``skulk://pair?z=...`` package."""

    invitation: InvitationStatus
    pairing_code: str

    def __repr__(self) -> str:
        return f"InvitationCreated(invitation={self.invitation!r}, pairing_code=<redacted>)"


class InvitationList(msgspec.Struct, frozen=True, kw_only=True):
    invitations: list[InvitationStatus]


class DeviceList(msgspec.Struct, frozen=True, kw_only=True):
    devices: list[DeviceStatus]


_CHALLENGE = msgspec.json.Decoder(ChallengeRequest)
_EXCHANGE = msgspec.json.Decoder(ExchangeRequest)
_TOKEN = msgspec.json.Decoder(TokenRequest)
_INVITATION = msgspec.json.Decoder(InvitationRequest)

NOT_A_GATEWAY: Final = (
    "this node is not the operator gateway; run 'skulk operator configure-relay' "
    "(or 'skulk operator pair') on this host first"
)
NO_RELAY: Final = (
    "relay access is not configured on this gateway, so a dashboard invitation has no "
    "route to offer; run 'skulk operator configure-relay' on this host first, or create "
    "a direct invitation with 'skulk operator pair --valid-for ... --exchange-url ...'"
)


def _not_gateway(status: int) -> ApiError:
    return authority_api_error(NotGateway(NOT_A_GATEWAY), status=status)


async def _call(fn: Callable[[*Ts], T], *args: *Ts, not_gateway_status: int | None = None) -> T:
    """Run one service call in a worker thread (it locks and fsyncs the store)."""
    try:
        return await asyncio.to_thread(fn, *args)
    except NotGateway:
        raise _not_gateway(not_gateway_status or NotGateway.status) from None
    except AuthorityError as exc:
        raise authority_api_error(exc) from None


def _service(
    authority: OperatorPairingService | None, *, not_gateway_status: int
) -> OperatorPairingService:
    if authority is None:
        raise _not_gateway(not_gateway_status)
    return authority


async def _devices_caller(
    request: HttpRequest, authority: OperatorPairingService | None
) -> str | None:
    """The calling device's id (bearer) or ``None`` (the direct owner's dashboard).

    With ``Authorization`` only the bearer rules apply: an invalid bearer never falls
    back to direct authority.
    """
    caller = operator_caller(request.scope)
    if caller is not None and caller.grant is not None:
        return caller.grant.device_id  # the operator listener checked bearer and scope
    token = bearer_token(request.scope)
    if token is not None:
        grant = await authorize_bearer(authority, token, DEVICES_MANAGE)
        return grant.device_id
    check_direct_owner(request.scope)
    return None


async def _direct_owner_gateway(
    request: HttpRequest, authority: OperatorPairingService | None
) -> OperatorPairingService:
    """The dashboard invitation routes: the direct owner, on a relay-configured gateway."""
    check_direct_owner(request.scope)
    service = _service(authority, not_gateway_status=409)
    if not await _call(service.is_gateway):
        raise _not_gateway(409)
    if not await _call(service.relay_configured):
        raise ApiError(409, NO_RELAY, code="relay_not_configured", headers=dict(NO_STORE_HEADERS))
    return service


class AuthController(Controller):
    path = "/v1/auth"
    tags = ("Operator authentication",)
    opt = declare(Requirement.PAIRING)
    request_max_body_size = MAX_AUTH_BODY_BYTES
    response_headers = tuple(ResponseHeader(name=k, value=v) for k, v in NO_STORE_HEADERS.items())

    @post(
        "/pairing-sessions/challenge",
        status_code=200,
        summary="Bind a device key to a pairing session or invitation attempt",
        responses=errors(OPENAI, 400, 404, 409, 410, 413, 422, 429, 503),
        operation_class=documented(body=ChallengeRequest),
    )
    async def challenge(
        self, request: HttpRequest, authority: OperatorPairingService | None
    ) -> ChallengeResult:
        body = decode_json(await request.body(), _CHALLENGE)
        service = _service(authority, not_gateway_status=503)
        result: ChallengeResult = await _call(
            service.challenge,
            body.nonce,
            body.device_name,
            body.device_public_key,
            body.invitation_id,
        )
        return result

    @post(
        "/pairing-sessions/exchange",
        status_code=200,
        summary="Exchange the device's signed proof for scoped credentials",
        responses=errors(OPENAI, 400, 401, 404, 409, 410, 413, 422, 429, 503),
        operation_class=documented(body=ExchangeRequest),
    )
    async def exchange(
        self, request: HttpRequest, authority: OperatorPairingService | None
    ) -> ExchangeResult:
        body = decode_json(await request.body(), _EXCHANGE)
        service = _service(authority, not_gateway_status=503)
        result: ExchangeResult = await _call(
            service.exchange, body.nonce, body.signature, body.invitation_id, body.attempt_id
        )
        return result

    @post(
        "/token",
        status_code=200,
        summary="Rotate a device's access and refresh tokens",
        responses=errors(OPENAI, 400, 401, 413, 429, 503),
        operation_class=documented(body=TokenRequest),
    )
    async def token(
        self, request: HttpRequest, authority: OperatorPairingService | None
    ) -> TokenGrant:
        body = decode_json(await request.body(), _TOKEN)
        if authority is None:
            raise ApiError(
                401, "the refresh credential is not valid on this node", code="unauthorized"
            )
        # A node that is not a gateway knows no device: the credential is invalid here.
        result: TokenGrant = await _call(
            authority.refresh, body.device_id, body.refresh_token, not_gateway_status=401
        )
        return result

    @get(
        "/devices",
        summary="Paired devices (bearer with devices:manage, or the dashboard)",
        responses=errors(OPENAI, 401, 403, 409, 503),
    )
    async def devices(
        self, request: HttpRequest, authority: OperatorPairingService | None
    ) -> DeviceList:
        caller = await _devices_caller(request, authority)
        service = _service(authority, not_gateway_status=409)
        rows: list[DeviceStatus] = await _call(service.list_devices, caller, not_gateway_status=409)
        return DeviceList(devices=rows)

    @delete(
        "/devices/{device_id:str}",
        status_code=204,
        summary="Revoke a paired device's credentials now",
        responses=errors(OPENAI, 401, 403, 404, 409, 503),
    )
    async def revoke_device(
        self,
        request: HttpRequest,
        authority: OperatorPairingService | None,
        device_id: str,
    ) -> None:
        await _devices_caller(request, authority)
        service = _service(authority, not_gateway_status=409)
        await _call(service.revoke_device, device_id, not_gateway_status=409)

    @post(
        "/pairing-invitations",
        status_code=201,
        summary="Create a reusable pairing invitation (dashboard on the gateway host only)",
        responses=errors(OPENAI, 400, 403, 409, 413, 422, 503),
        operation_class=documented(body=InvitationRequest),
    )
    async def create_invitation(
        self, request: HttpRequest, authority: OperatorPairingService | None
    ) -> InvitationCreated:
        service = await _direct_owner_gateway(request, authority)
        body = decode_json(await request.body(), _INVITATION)
        issue = await _call(
            service.create_invitation,
            body.valid_for_seconds,
            body.max_pairings,
            None,
            not_gateway_status=409,
        )
        if issue.invitation is None:  # the service always returns one for invitations
            raise ApiError(500, "internal error; see the node's log", code="internal_error")
        return InvitationCreated(invitation=issue.invitation, pairing_code=issue.uri)

    @get(
        "/pairing-invitations",
        summary="Safe status of this gateway's invitations",
        responses=errors(OPENAI, 403, 409, 503),
    )
    async def list_invitations(
        self, request: HttpRequest, authority: OperatorPairingService | None
    ) -> InvitationList:
        service = await _direct_owner_gateway(request, authority)
        rows: list[InvitationStatus] = await _call(service.list_invitations, not_gateway_status=409)
        return InvitationList(invitations=rows)

    @delete(
        "/pairing-invitations/{invitation_id:str}",
        status_code=204,
        summary="Revoke an invitation (paired devices stay paired)",
        responses=errors(OPENAI, 403, 404, 409, 503),
    )
    async def revoke_invitation(
        self,
        request: HttpRequest,
        authority: OperatorPairingService | None,
        invitation_id: str,
    ) -> None:
        service = await _direct_owner_gateway(request, authority)
        await _call(service.revoke_invitation, invitation_id, not_gateway_status=409)
