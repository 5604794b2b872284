"""The Extension Capabilities routes: discovery, unary calls, stream opening and cancel.

A body that parses as the call envelope always gets 200 with a typed
:class:`~skulk_core.extensions.capabilities.CapabilityResult`, failures included
(``error.code`` says which); only a body that is not the envelope at all (not JSON,
a missing field, an unknown field, an out-of-range value) gets 422, since there is
no call id to answer. Bodies are read up to 4 MiB so that an over-1-MiB payload is
still answered with a typed ``payload_too_large``; past that the body is refused
whole (413).

Stream output is never an HTTP response: an admitted stream's frames go to
``caller_node`` over the fabric's data plane.
"""

from __future__ import annotations

from typing import Annotated, Final, TypeVar

import msgspec
from litestar import Controller, get, post
from litestar.params import Parameter

from skulk_core.extensions.capabilities import (
    MAX_ID_LENGTH,
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityResult,
    descriptor_revision,
)
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openapi import OPENAI, documented, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import Node

MAX_CAPABILITY_BODY_BYTES: Final = 4 * 1024 * 1024

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_LENGTH)]


class StreamCancel(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    call_id: _Id
    caller_node: _Id
    target_node: _Id
    message: Annotated[str, msgspec.Meta(max_length=1000)] | None = None


class CapabilityListing(msgspec.Struct, frozen=True, kw_only=True):
    node_id: str
    capabilities: list[CapabilityDescriptor]
    revisions: dict[str, str]
    """``id@version`` → the revision digest a call pins."""


T = TypeVar("T")


class StreamCancelled(msgspec.Struct, frozen=True, kw_only=True):
    cancelled: bool


_call_decoder: Final = msgspec.json.Decoder(CapabilityCall)
_cancel_decoder: Final = msgspec.json.Decoder(StreamCancel)


def _unprocessable(raw: bytes, decoder: msgspec.json.Decoder[T]) -> T:
    try:
        return decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ApiError(422, f"not a capability envelope: {exc}", code="invalid_envelope") from None


def _fabric(capabilities: CapabilityService | None) -> CapabilityService:
    if capabilities is None:
        raise ApiError(503, "this node serves no capability fabric", code="unavailable")
    return capabilities


class CapabilitiesController(Controller):
    tags = ("Extension Capabilities",)
    opt = declare(Requirement.OPEN)

    @get(
        "/v1/capabilities",
        summary="The capability descriptors a node serves",
        responses=errors(OPENAI, 400, 503),
    )
    async def describe(
        self,
        capabilities: CapabilityService | None,
        node_id: Annotated[str | None, Parameter(query="node_id", max_length=MAX_ID_LENGTH)] = None,
    ) -> CapabilityListing:
        fabric = _fabric(capabilities)
        target = node_id or fabric.node_id
        descriptors = await fabric.describe_node(target)
        return CapabilityListing(
            node_id=target,
            capabilities=descriptors,
            revisions={d.qualified_id: descriptor_revision(d) for d in descriptors},
        )

    @post(
        "/v1/capabilities/call",
        status_code=200,
        summary="Call a unary capability on this node",
        request_max_body_size=MAX_CAPABILITY_BODY_BYTES,
        responses=errors(OPENAI, 413, 422, 503),
        operation_class=documented(body=CapabilityCall),
    )
    async def call(
        self, request: HttpRequest, capabilities: CapabilityService | None
    ) -> CapabilityResult:
        call: CapabilityCall = _unprocessable(await request.body(), _call_decoder)
        return await _fabric(capabilities).serve_call(call)

    @post(
        "/v1/capabilities/stream",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Open a streaming capability on this node (frames go to caller_node)",
        request_max_body_size=MAX_CAPABILITY_BODY_BYTES,
        responses=errors(OPENAI, 413, 422, 503),
        operation_class=documented(body=CapabilityCall),
    )
    async def stream(
        self,
        request: HttpRequest,
        capabilities: CapabilityService | None,
        node: Node,
    ) -> CapabilityResult:
        call: CapabilityCall = _unprocessable(await request.body(), _call_decoder)
        fabric = _fabric(capabilities)
        if call.caller_node not in node.state.topology.nodes:
            # NOTE: a stream holds one of the node's 32 slots and sends its frames to
            # caller_node: only a member of this cluster may be named, never a stranger.
            raise ApiError(
                403,
                f"caller_node {call.caller_node!r} is not a member of this cluster",
                code="unknown_caller",
            )
        return await fabric.open_stream(call, fabric.emitter_for(call.caller_node))

    @post(
        "/v1/capabilities/stream/cancel",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Cancel an admitted stream (only its caller's identity can)",
        request_max_body_size=64 * 1024,
        responses=errors(OPENAI, 413, 422, 503),
        operation_class=documented(body=StreamCancel),
    )
    async def cancel(
        self, request: HttpRequest, capabilities: CapabilityService | None
    ) -> StreamCancelled:
        body: StreamCancel = _unprocessable(await request.body(), _cancel_decoder)
        fabric = _fabric(capabilities)
        if body.target_node != fabric.node_id:
            return StreamCancelled(cancelled=False)
        return StreamCancelled(
            cancelled=fabric.cancel_stream(body.caller_node, body.call_id, body.message)
        )
