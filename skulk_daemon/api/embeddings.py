"""``POST /v1/embeddings``: OpenAI embeddings (the logic is
:mod:`skulk_daemon.embeddings.service`).

A client that disconnects while its inputs are embedded cancels the work on the
runner; the answer is then the 499 nobody reads.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Final, TypeVar

from litestar import Controller, Response, post

from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openapi import COMMAND_ID_HEADER, OPENAI, documented, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.embeddings.protocol import (
    EmbeddingList,
    EmbeddingRequest,
    decode_embedding_request,
)
from skulk_daemon.embeddings.service import STATUS_CANCELLED, EmbeddingService
from skulk_daemon.errors import ApiError

MAX_EMBEDDINGS_BODY_BYTES: Final = 16 * 1024 * 1024
"""2,048 inputs of a full 512-token window are about 5 MiB of text; this leaves room
for JSON escaping and stays far below the runner's frame bound."""

T = TypeVar("T")


async def _disconnected(request: HttpRequest) -> None:
    """Returns once the client has gone (the body is already read, so the next
    ASGI message is ``http.disconnect``)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: HttpRequest, work: Awaitable[T]) -> tuple[T] | None:
    """``work``'s result (in a 1-tuple), or ``None`` if the client left first, in
    which case ``work`` is cancelled."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # NOTE: cancelling the embed task is what cancels the work on the runner
        # (the supervisor's await is interrupted and sends Cancel).
        watch.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return None if task.cancelled() else (task.result(),)


class EmbeddingsController(Controller):
    tags = ("OpenAI",)
    opt = declare(Requirement.OPEN)

    @post(
        "/v1/embeddings",
        status_code=200,
        summary="OpenAI Embeddings",
        request_max_body_size=MAX_EMBEDDINGS_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, STATUS_CANCELLED, 503),
        operation_class=documented(body=EmbeddingRequest, headers=COMMAND_ID_HEADER),
    )
    async def create_embeddings(
        self,
        request: HttpRequest,
        embeddings: EmbeddingService,
    ) -> Response[EmbeddingList]:
        admitted = await embeddings.admit_served(decode_embedding_request(await request.body()))
        outcome = await unless_disconnected(request, embeddings.run(admitted))
        if outcome is None:
            raise ApiError(STATUS_CANCELLED, "the client disconnected", code="client_disconnected")
        (result,) = outcome
        return Response(
            embeddings.answer(admitted, result),
            headers={"X-Skulk-Command-Id": admitted.command_id},
        )
