"""``POST /v1/completions``: OpenAI's (legacy) text completions, for base models above all."""

from __future__ import annotations

from typing import Final

from litestar import Controller, MediaType, post
from litestar.response import Stream

from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openai_chat import SSE_HEADERS, generation_doc
from skulk_daemon.api.openapi import (
    OPENAI,
    errors,
)
from skulk_daemon.api.streaming import BodyStream
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.chat.completions import open_completion
from skulk_daemon.chat.completions_protocol import Completion, CompletionChunk, CompletionRequest
from skulk_daemon.chat.completions_request import decode_completion_request
from skulk_daemon.chat.service import ChatService

MAX_COMPLETION_BODY_BYTES: Final = 8 * 1024 * 1024
"""Prompts are text: a list of them fits in this (the rendered prompt has its own bound)."""

COMPLETION_DOC: Final = generation_doc(CompletionRequest, Completion, CompletionChunk)


class OpenAICompletionsController(Controller):
    tags = ("OpenAI",)
    opt = declare(Requirement.OPEN)

    @post(
        "/v1/completions",
        status_code=200,
        summary="OpenAI Completions: continue a prompt as written, with no chat template",
        description="Each prompt (a string, or a list of them) is sent to the model as "
        "written; `n` choices per prompt are generated side by side. The same admission, "
        "routing, batching, prefix reuse and cancellation as chat. `suffix` (fill in the "
        "middle), token-id prompts and `echo` with `logprobs` are refused with 400.",
        request_max_body_size=MAX_COMPLETION_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413),
        operation_class=COMPLETION_DOC,
    )
    async def completions(self, request: HttpRequest, chat: ChatService) -> Stream:
        body = decode_completion_request(await request.body())
        opened = await open_completion(chat, body)
        headers = {"X-Skulk-Command-Id": opened.command_id}
        if body.stream:
            return BodyStream(
                opened.sse(), media_type="text/event-stream", headers={**SSE_HEADERS, **headers}
            )
        return BodyStream(opened.json(), media_type=MediaType.JSON, headers=headers)
