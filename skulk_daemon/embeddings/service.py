"""Embeddings from a placed ``TextEmbedding`` model: admission, the runner, the answer.

The request is checked and routed here (400 for bad input or a model that does not
embed, 404 for a model with no instance), then embedded by the instance's runner as
one task. The answer is OpenAI's list shape, floats or base64 (little-endian float32,
what the runner computed). ``POST /v1/cancel/{command_id}`` with the task's command id
(shown on the task in ``/state``) stops the work on the runner between batches; so
does cancelling the awaiting caller (a client that disconnects).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from skulk_core.chat.generation import (
    ERROR_CONTEXT_LENGTH_EXCEEDED,
    ERROR_INVALID_REQUEST,
    ErrorChunk,
)
from skulk_core.cluster.routing import select_instance
from skulk_core.ids import CommandId, InstanceId, ModelId, TaskId, new_command_id, new_task_id
from skulk_core.models.cards import ModelTask
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.embeddings.protocol import (
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
)
from skulk_daemon.errors import ApiError
from skulk_daemon.errors import bad_request as _bad
from skulk_daemon.node.node import Node
from skulk_daemon.placement.on_demand import OnDemandLoader
from skulk_daemon.runner.client import ERROR_RUNNER_FAILED
from skulk_daemon.runner.protocol import ERROR_CANCELLED, Embedded
from skulk_daemon.worker.supervisor import Supervisor

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("skulk.embeddings")

MAX_EMBEDDING_INPUTS: Final = 2048
"""Inputs in one request (OpenAI's own limit)."""
STATUS_CANCELLED: Final = 499
"""A cancelled request (nginx's "client closed request"): a 4xx, so SDKs do not retry."""

_ERROR_INSTANCE_UNAVAILABLE: Final = "instance_unavailable"


@dataclass(frozen=True, slots=True)
class AdmittedEmbedding:
    command_id: CommandId
    task_id: TaskId
    model: str
    instance_id: InstanceId
    inputs: tuple[str, ...]
    base64: bool


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


def _vectors(result: Embedded) -> np.ndarray[tuple[int, int], np.dtype[np.float32]]:
    # NOTE: numpy (half a second of a daemon's start on a busy machine) is imported
    # by the first embedding request, not at start-up.
    import numpy as np  # noqa: PLC0415

    return np.frombuffer(result.vectors, dtype="<f4").reshape(result.count, result.dimensions)


def embedding_list(admitted: AdmittedEmbedding, result: Embedded) -> EmbeddingList:
    data = [
        Embedding(
            index=index,
            embedding=base64.b64encode(row.tobytes()).decode("ascii")
            if admitted.base64
            else row.astype("float64").tolist(),
        )
        for index, row in enumerate(_vectors(result))
    ]
    return EmbeddingList(
        data=data,
        model=admitted.model,
        usage=EmbeddingUsage(prompt_tokens=result.prompt_tokens, total_tokens=result.prompt_tokens),
    )


def refusal(code: str, message: str) -> ApiError:
    """A runner's refusal as the status a client should see."""
    if code in (ERROR_CONTEXT_LENGTH_EXCEEDED, ERROR_INVALID_REQUEST):
        return ApiError(400, message, code=code)
    if code == ERROR_CANCELLED:
        return ApiError(STATUS_CANCELLED, message, code=code)
    if code in (ERROR_RUNNER_FAILED, _ERROR_INSTANCE_UNAVAILABLE):
        return ApiError(503, message, code=code)
    return ApiError(500, message, code=code, type="api_error")


class EmbeddingService:
    """Admission and dispatch of embedding requests on this node."""

    def __init__(
        self,
        node: Node,
        worker: Supervisor,
        commands: ActiveCommands,
        on_demand: OnDemandLoader | None = None,
    ) -> None:
        self._node = node
        self._worker = worker
        self._commands = commands
        self._on_demand = on_demand

    async def admit_served(self, body: EmbeddingRequest) -> AdmittedEmbedding:
        """:meth:`admit`, after placing an unplaced model when
        ``inference.load_on_demand`` is on."""
        if self._on_demand is not None:
            await self._on_demand.serve(body.model, ModelTask.TEXT_EMBEDDING)
        return self.admit(body)

    def admit(self, body: EmbeddingRequest) -> AdmittedEmbedding:
        """Everything refused before the runner sees the request; the instance to use."""
        if body.dimensions is not None:
            raise _bad(
                "dimensions is not supported: embeddings come back at the model's native "
                "dimensionality",
                code="dimensions_not_supported",
            )
        inputs = _texts(body.input)
        model_id = ModelId(body.model)
        entry = self._node.catalog().get(model_id)
        if entry is not None and ModelTask.TEXT_EMBEDDING not in entry.card.tasks:
            raise _bad(
                f"model {body.model} does not support embeddings (TextEmbedding)",
                code="model_not_embedding",
            )
        instance = select_instance(self._node.state, model_id)
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

    async def run(self, admitted: AdmittedEmbedding) -> Embedded | ErrorChunk:
        """Embed on the instance's runner, cancellable by command id while it runs."""
        worker = self._worker
        self._commands.register(
            admitted.command_id, lambda: worker.cancel(admitted.instance_id, admitted.task_id)
        )
        try:
            return await worker.embed(
                admitted.instance_id, admitted.task_id, admitted.inputs, admitted.command_id
            )
        finally:
            self._commands.finish(admitted.command_id)

    @staticmethod
    def answer(admitted: AdmittedEmbedding, result: Embedded | ErrorChunk) -> EmbeddingList:
        """OpenAI's list for a result; the runner's refusal as an :class:`ApiError`."""
        if not isinstance(result, Embedded):
            raise refusal(result.code, result.message)
        return embedding_list(admitted, result)

    def placed_model(self) -> str | None:
        """The first model (by id) that embeds and has an instance to serve it."""
        node = self._node
        for model_id, entry in sorted(node.catalog().by_id.items()):
            if ModelTask.TEXT_EMBEDDING not in entry.card.tasks:
                continue
            if select_instance(node.state, ModelId(model_id)) is not None:
                return str(model_id)
        return None

    async def embed_texts(
        self, texts: Sequence[str], model: str | None
    ) -> list[list[float]] | None:
        """Vectors for ``texts`` in process (extensions), ``None`` where the route would
        refuse or the runner cannot serve; refusals are not errors here."""
        chosen = model or self.placed_model()
        if chosen is None:
            return None
        result = await self.run(self.admit(EmbeddingRequest(model=chosen, input=list(texts))))
        if not isinstance(result, Embedded):
            log.warning("embed_texts: the runner refused (%s): %s", result.code, result.message)
            return None
        return [row.astype("float64").tolist() for row in _vectors(result)]
