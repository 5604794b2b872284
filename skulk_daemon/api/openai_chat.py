"""``POST /v1/chat/completions`` and ``POST /v1/cancel/{command_id}``."""

from __future__ import annotations

from typing import Final

import msgspec
from litestar import Controller, MediaType, post
from litestar.openapi.spec import Operation
from litestar.response import Stream

from skulk_core.ids import CommandId
from skulk_core.steward.lifecycle import STEWARD_MODEL_ID
from skulk_daemon.api.authority import caller_of, declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openapi import (
    COMMAND_ID_HEADER,
    JSON,
    OPENAI,
    SSE,
    OpenAIError,
    documented,
    errors,
    json_of,
    sse_of,
)
from skulk_daemon.api.streaming import BodyStream
from skulk_daemon.authority.policy import Caller, Requirement
from skulk_daemon.chat.openai_protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    CommandCancelled,
)
from skulk_daemon.chat.openai_request import decode_chat_request, to_task
from skulk_daemon.chat.openai_wire import json_body, sse_stream
from skulk_daemon.chat.service import ChatService
from skulk_daemon.errors import ApiError

MAX_CHAT_BODY_BYTES: Final = 40 * 1024 * 1024
"""Encoded image content is bounded at 32 MiB; the rest of a chat body is small."""

SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

LATE_ERROR: Final = (
    "once the answer has started (status 200 sent), a failure arrives as the error "
    "envelope in its place"
)
"""Why a success body may be an error envelope (JSON bodies and SSE streams alike)."""


def generation_doc(
    body: type[msgspec.Struct], answer: type[msgspec.Struct], chunk: type[msgspec.Struct]
) -> type[Operation]:
    """An OpenAI generation route's document: ``answer`` as JSON, ``chunk``s as SSE."""
    return documented(
        body=body,
        ok={
            JSON: json_of(answer, OpenAIError, description=f"`stream: false`; {LATE_ERROR}"),
            SSE: sse_of(
                chunk,
                OpenAIError,
                description="`stream: true`: chunks (or the error envelope), between comment "
                "lines (`: command_id ...`, `: keep-alive`, `: generation_stats {...}`), then "
                "`data: [DONE]`",
                done="[DONE]",
            ),
        },
        headers=COMMAND_ID_HEADER,
    )


CHAT_COMPLETION_DOC: Final = generation_doc(
    ChatCompletionRequest, ChatCompletion, ChatCompletionChunk
)


class OpenAIChatController(Controller):
    tags = ("OpenAI",)
    opt = declare(Requirement.OPEN)

    @post(
        "/v1/chat/completions",
        status_code=200,
        summary="OpenAI Chat Completions (streaming and not)",
        request_max_body_size=MAX_CHAT_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, 503),
        operation_class=CHAT_COMPLETION_DOC,
    )
    async def chat_completions(
        self,
        request: HttpRequest,
        chat: ChatService,
    ) -> Stream:
        body = decode_chat_request(await request.body())
        if body.model == STEWARD_MODEL_ID:
            operator = caller_of(request) in (
                Caller.TRUSTED_FABRIC,
                Caller.OPERATOR,
                Caller.LOOPBACK,
            )
            turn = await chat.open_steward_turn(to_task(body), operator=operator)
        else:
            turn = await chat.open_turn(to_task(body))
        admitted, events = turn.admitted, turn.events
        headers = {"X-Skulk-Command-Id": admitted.command_id}
        if body.stream:
            return BodyStream(
                turn.respond(sse_stream(admitted, events)),
                media_type="text/event-stream",
                headers={**SSE_HEADERS, **headers},
            )
        return BodyStream(
            turn.respond(json_body(admitted, events)), media_type=MediaType.JSON, headers=headers
        )

    @post(
        "/v1/cancel/{command_id:str}",
        status_code=200,
        summary="Cancel an in-flight command",
        responses=errors(OPENAI, 404),
    )
    async def cancel(self, command_id: str, chat: ChatService) -> CommandCancelled:
        steward = chat.is_steward_turn(CommandId(command_id))
        if not chat.cancel(CommandId(command_id)):
            raise ApiError(404, "Command not found or already completed", code="command_not_found")
        message = "Steward turn cancelled." if steward else "Command cancelled."
        return CommandCancelled(message=message, command_id=command_id)
