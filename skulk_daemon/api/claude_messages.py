"""``POST /v1/messages`` (Anthropic Claude Messages).

Errors from this route leave in Anthropic's shape,
``{"type": "error", "error": {"type", "message"}}``, with the status the shared
admission chose, so Anthropic's SDKs raise their usual exception classes.
"""

from __future__ import annotations

import logging

from litestar import Controller, MediaType, Response, post
from litestar.exceptions import HTTPException
from litestar.response import Stream
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.types import ExceptionHandlersMap

from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openai_chat import LATE_ERROR, MAX_CHAT_BODY_BYTES, SSE_HEADERS
from skulk_daemon.api.openapi import (
    CLAUDE,
    COMMAND_ID_HEADER,
    JSON,
    SSE,
    ClaudeError,
    documented,
    errors,
    json_of,
    sse_of,
)
from skulk_daemon.api.streaming import BodyStream
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.chat.claude_request import MessagesRequest, decode_messages_request, to_task
from skulk_daemon.chat.claude_wire import (
    Message,
    error_document,
    error_type,
    json_body,
    sse_stream,
)
from skulk_daemon.chat.service import ChatService
from skulk_daemon.errors import ApiError, nested_too_deeply

log = logging.getLogger(__name__)


def _respond(
    status: int, message: str, headers: dict[str, str] | None = None
) -> Response[dict[str, object]]:
    return Response(
        content=error_document(error_type(status), message),
        status_code=status,
        media_type=MediaType.JSON,
        headers=headers or {},
    )


def _api_error(_: HttpRequest, exc: ApiError) -> Response[dict[str, object]]:
    return _respond(exc.status_code, exc.message, exc.headers)


def _http_exception(_: HttpRequest, exc: HTTPException) -> Response[dict[str, object]]:
    return _respond(exc.status_code, exc.detail, dict(exc.headers or {}))


def _too_deep(request: HttpRequest, _: RecursionError) -> Response[dict[str, object]]:
    return _api_error(request, nested_too_deeply())


def _unexpected(_: HttpRequest, exc: Exception) -> Response[dict[str, object]]:
    # The traceback goes to the node's log; the client gets no internals.
    log.exception("unhandled error while serving a Claude Messages request", exc_info=exc)
    return _respond(HTTP_500_INTERNAL_SERVER_ERROR, "internal error; see the node's log")


MESSAGES_DOC = documented(
    body=MessagesRequest,
    ok={
        JSON: json_of(Message, ClaudeError, description=f"`stream: false`; {LATE_ERROR}"),
        SSE: sse_of(
            description="`stream: true`: Anthropic's named events (`message_start`, "
            "`content_block_start`/`_delta`/`_stop`, `message_delta`, `message_stop`, "
            "`ping`), or an `error` event carrying the error envelope",
        ),
    },
    headers={
        **COMMAND_ID_HEADER,
        "request-id": "The same id, where Anthropic's SDKs look for it",
    },
)


class ClaudeMessagesController(Controller):
    tags = ("Claude",)
    opt = declare(Requirement.OPEN)
    # NOTE: controller-level handlers take precedence over the app's OpenAI-shaped ones
    # for everything raised while handling this route.
    exception_handlers: ExceptionHandlersMap | None = {  # noqa: RUF012 (Litestar's setting)
        ApiError: _api_error,
        HTTPException: _http_exception,
        RecursionError: _too_deep,
        Exception: _unexpected,
    }

    @post(
        "/v1/messages",
        status_code=200,
        summary="Anthropic Claude Messages (streaming and not)",
        request_max_body_size=MAX_CHAT_BODY_BYTES,
        responses=errors(CLAUDE, 400, 404, 413, 503),
        operation_class=MESSAGES_DOC,
    )
    async def messages(
        self,
        request: HttpRequest,
        chat: ChatService,
    ) -> Stream:
        body = decode_messages_request(await request.body())
        turn = await chat.open_turn(to_task(body))
        admitted, events = turn.admitted, turn.events
        # request-id is where Anthropic's SDKs look for a request's id (`_request_id`).
        headers = {"X-Skulk-Command-Id": admitted.command_id, "request-id": admitted.command_id}
        if body.stream:
            return BodyStream(
                turn.respond(sse_stream(admitted, events)),
                media_type="text/event-stream",
                headers={**SSE_HEADERS, **headers},
            )
        return BodyStream(
            turn.respond(json_body(admitted, events)), media_type=MediaType.JSON, headers=headers
        )
