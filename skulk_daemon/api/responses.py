"""``POST /v1/responses`` (the OpenAI Responses API).

Stateless: Skulk keeps no response after sending it, so ``previous_response_id``
and ``conversation`` are refused (400) and clients send the whole conversation in
``input``. The response id is ``resp_<command id>``; the command id also comes in
the ``X-Skulk-Command-Id`` header and works with ``POST /v1/cancel/{command_id}``.
"""

from __future__ import annotations

from typing import get_args

from litestar import Controller, MediaType, post
from litestar.response import Stream

from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openai_chat import MAX_CHAT_BODY_BYTES, SSE_HEADERS
from skulk_daemon.api.openapi import (
    COMMAND_ID_HEADER,
    JSON,
    OPENAI,
    SSE,
    documented,
    errors,
    json_of,
    sse_of,
)
from skulk_daemon.api.streaming import BodyStream
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.chat.responses_protocol import ResponseEvent, ResponseObject
from skulk_daemon.chat.responses_request import (
    ResponsesRequest,
    decode_responses_request,
    to_task,
)
from skulk_daemon.chat.responses_wire import initial_response, json_body, sse_stream
from skulk_daemon.chat.service import ChatService

RESPONSES_DOC = documented(
    body=ResponsesRequest,
    ok={
        JSON: json_of(
            ResponseObject,
            description="`stream: false`; a generation that fails once started is a "
            "response with status `failed` (or `cancelled`) and an `error`",
        ),
        SSE: sse_of(
            *get_args(ResponseEvent),
            description="`stream: true`: `event:`/`data:` pairs of Responses stream events, "
            "with comment lines (`: command_id ...`, `: keep-alive`)",
        ),
    },
    headers=COMMAND_ID_HEADER,
)


class ResponsesController(Controller):
    tags = ("OpenAI",)
    opt = declare(Requirement.OPEN)

    @post(
        "/v1/responses",
        status_code=200,
        summary="OpenAI Responses (streaming and not; stateless)",
        request_max_body_size=MAX_CHAT_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, 503),
        operation_class=RESPONSES_DOC,
    )
    async def create_response(
        self,
        request: HttpRequest,
        chat: ChatService,
    ) -> Stream:
        body = decode_responses_request(await request.body())
        turn = await chat.open_turn(to_task(body))
        admitted, events = turn.admitted, turn.events
        initial = initial_response(
            body, response_id=f"resp_{admitted.command_id}", created_at=admitted.created
        )
        headers = {"X-Skulk-Command-Id": admitted.command_id}
        want_logprobs = admitted.generation.sampling.logprobs
        parallel = body.parallel_tool_calls is not False
        if body.stream:
            return BodyStream(
                turn.respond(
                    sse_stream(
                        initial,
                        events,
                        command_id=admitted.command_id,
                        want_logprobs=want_logprobs,
                        parallel_tool_calls=parallel,
                    )
                ),
                media_type="text/event-stream",
                headers={**SSE_HEADERS, **headers},
            )
        return BodyStream(
            turn.respond(
                json_body(
                    initial, events, want_logprobs=want_logprobs, parallel_tool_calls=parallel
                )
            ),
            media_type=MediaType.JSON,
            headers=headers,
        )
