"""``POST /v1/embeddings``: OpenAI embeddings from a placed ``TextEmbedding`` model.

The request is checked and routed here (400 for bad input or a model that does
not embed, 404 for a model with no instance), then embedded by the instance's
runner as one task. The answer is OpenAI's list shape, floats or base64
(little-endian float32, what the runner computed). A client that disconnects, or
a ``POST /v1/cancel/{command_id}`` with the task's command id (shown on the task
in ``/state``), stops the work on the runner between batches.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import msgspec
import numpy as np
from litestar import Controller, Request, Response, post

from skulk_core.cards import ModelTask
from skulk_core.ids import CommandId, InstanceId, ModelId, TaskId, new_command_id, new_task_id
from skulk_core.routing import select_instance
from skulk_daemon.api.errors import ApiError, decode_json
from skulk_daemon.api.errors import bad_request as _bad
from skulk_daemon.chat.commands import ActiveCommands
from skulk_daemon.engines.base import ERROR_CONTEXT_LENGTH_EXCEEDED, ERROR_INVALID_REQUEST
from skulk_daemon.node import Node
from skulk_daemon.runner.client import ERROR_RUNNER_FAILED
from skulk_daemon.runner.protocol import ERROR_CANCELLED, Embedded
from skulk_daemon.worker.supervisor import Supervisor

MAX_EMBEDDING_INPUTS: Final = 2048
"""Inputs in one request (OpenAI's own limit)."""
MAX_EMBEDDINGS_BODY_BYTES: Final = 16 * 1024 * 1024
"""2,048 inputs of a full 512-token window are about 5 MiB of text; this leaves room
for JSON escaping and stays far below the runner's frame bound."""
STATUS_CANCELLED: Final = 499
"""A cancelled request (nginx's "client closed request"): a 4xx, so SDKs do not retry."""

_ERROR_INSTANCE_UNAVAILABLE: Final = "instance_unavailable"

T = TypeVar("T")


class EmbeddingRequest(msgspec.Struct, frozen=True, kw_only=True):
    """OpenAI's request, decoded leniently (unknown fields are ignored, as OpenAI does).

    Token-id inputs decode so that they can be refused with a clear message: a
    client's token ids come from its own tokenizer, not this model's.
    """

    model: str
    input: str | list[str | int | list[int]]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = None
    user: str | None = None


class Embedding(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    embedding: list[float] | str
    object: Literal["embedding"] = "embedding"


class EmbeddingUsage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct, frozen=True, kw_only=True):
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
    object: Literal["list"] = "list"


@dataclass(frozen=True, slots=True)
class AdmittedEmbedding:
    command_id: CommandId
    task_id: TaskId
    model: str
    instance_id: InstanceId
    inputs: tuple[str, ...]
    base64: bool


_decoder: Final = msgspec.json.Decoder(EmbeddingRequest)


def decode_embedding_request(raw: bytes) -> EmbeddingRequest:
    return decode_json(raw, _decoder)


def _texts(raw: str | list[str | int | list[int]]) -> tuple[str, ...]:
    items = [raw] if isinstance(raw, str) else raw
    if not items:
        raise _bad("input must not be an empty list")
    if len(items) > MAX_EMBEDDING_INPUTS:
        raise _bad(f"input holds {len(items)} items; at most {MAX_EMBEDDING_INPUTS} are allowed")
    texts: list[str] = []
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise _bad("token-id input is not supported; send the text to embed")
        if not item:
            raise _bad(f"input[{index}] must not be an empty string")
        texts.append(item)
    return tuple(texts)


def admit_embedding(node: Node, body: EmbeddingRequest) -> AdmittedEmbedding:
    """Everything refused before the runner sees the request; the instance to use."""
    if body.dimensions is not None:
        raise _bad(
            "dimensions is not supported: embeddings come back at the model's native "
            "dimensionality",
            code="dimensions_not_supported",
        )
    inputs = _texts(body.input)
    model_id = ModelId(body.model)
    entry = node.catalog().get(model_id)
    if entry is not None and ModelTask.TEXT_EMBEDDING not in entry.card.tasks:
        raise _bad(
            f"model {body.model} does not support embeddings (TextEmbedding)",
            code="model_not_embedding",
        )
    instance = select_instance(node.state, model_id)
    if entry is None or instance is None:
        raise ApiError(404, f"No instance found for model {body.model}", code="model_not_found")
    return AdmittedEmbedding(
        command_id=new_command_id(),
        task_id=new_task_id(),
        model=body.model,
        instance_id=instance.instance_id,
        inputs=inputs,
        base64=body.encoding_format == "base64",
    )


def embedding_list(admitted: AdmittedEmbedding, result: Embedded) -> EmbeddingList:
    rows = np.frombuffer(result.vectors, dtype="<f4").reshape(result.count, result.dimensions)
    data = [
        Embedding(
            index=index,
            embedding=base64.b64encode(row.tobytes()).decode("ascii")
            if admitted.base64
            else row.astype(np.float64).tolist(),
        )
        for index, row in enumerate(rows)
    ]
    return EmbeddingList(
        data=data,
        model=admitted.model,
        usage=EmbeddingUsage(prompt_tokens=result.prompt_tokens, total_tokens=result.prompt_tokens),
    )


def _refusal(code: str, message: str) -> ApiError:
    if code in (ERROR_CONTEXT_LENGTH_EXCEEDED, ERROR_INVALID_REQUEST):
        return ApiError(400, message, code=code)
    if code == ERROR_CANCELLED:
        return ApiError(STATUS_CANCELLED, message, code=code)
    if code in (ERROR_RUNNER_FAILED, _ERROR_INSTANCE_UNAVAILABLE):
        return ApiError(503, message, code=code)
    return ApiError(500, message, code=code, type="api_error")


async def _disconnected(request: Request[Any, Any, Any]) -> None:
    """Returns once the client has gone (the body is already read, so the next
    ASGI message is ``http.disconnect``)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(
    request: Request[Any, Any, Any], work: Coroutine[Any, Any, T]
) -> tuple[T] | None:
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

    @post(
        "/v1/embeddings",
        status_code=200,
        summary="OpenAI Embeddings",
        request_max_body_size=MAX_EMBEDDINGS_BODY_BYTES,
    )
    async def create_embeddings(
        self,
        request: Request[Any, Any, Any],
        node: Node,
        worker: Supervisor,
        commands: ActiveCommands,
    ) -> Response[EmbeddingList]:
        admitted = admit_embedding(node, decode_embedding_request(await request.body()))
        commands.register(
            admitted.command_id, lambda: worker.cancel(admitted.instance_id, admitted.task_id)
        )
        try:
            outcome = await unless_disconnected(
                request,
                worker.embed(
                    admitted.instance_id, admitted.task_id, admitted.inputs, admitted.command_id
                ),
            )
        finally:
            commands.finish(admitted.command_id)
        if outcome is None:
            raise ApiError(STATUS_CANCELLED, "the client disconnected", code="client_disconnected")
        (result,) = outcome
        if not isinstance(result, Embedded):
            raise _refusal(result.code, result.message)
        return Response(
            embedding_list(admitted, result), headers={"X-Skulk-Command-Id": admitted.command_id}
        )
