"""Field telemetry's local queue: the content-free samples that would be sent next.

While ``telemetry.enabled`` is set, every generation this node serves (a supervisor
generation listener) queues one :class:`FieldSample`: the model id, the node's
canonical hardware class, the engine, time to first token, decode rate, token counts,
or the failure's class. Never a prompt, a completion, a user or an address. The queue
holds at most :data:`MAX_PENDING_SAMPLES`; past that the oldest sample is dropped and
counted. This build has no ingest service: nothing leaves the node, and
``GET /v1/telemetry/preview`` shows exactly what would.
"""

from __future__ import annotations

from collections import deque
from typing import Final

import msgspec

from skulk_core.chat.generation import EngineChunk, ErrorChunk, FinishChunk
from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.ids import ModelId
from skulk_daemon.node.node import Node

MAX_PENDING_SAMPLES: Final = 256
"""The next batch's bound: one sample more drops the oldest."""


class FieldSample(msgspec.Struct, frozen=True, kw_only=True):
    """One content-free field-telemetry sample: ids, classes, timings, counts, enums."""

    model_id: str
    hardware_class: str
    engine: str
    time_to_first_token_ms: float | None = None
    decode_tokens_per_second: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failure_class: str | None = None


def hardware_class(reading: NodeTelemetry | None) -> str:
    """The canonical class of this node's hardware: its accelerator's vendor
    (``nvidia``, ``apple``, ...) or ``cpu``; never a model name, host name or serial."""
    if reading is None:
        return "unknown"
    accelerator = reading.system.accelerator
    if accelerator is not None:
        return accelerator.vendor.lower().replace(" ", "_") or "accelerator"
    return "cpu"


class FieldQueue:
    def __init__(self, node: Node) -> None:
        self._node = node
        self._pending: deque[FieldSample] = deque()
        self.dropped_since_start = 0

    def pending(self) -> tuple[FieldSample, ...]:
        return tuple(self._pending)

    def generation_ended(self, model_id: ModelId, chunk: EngineChunk, served: str) -> None:
        """A generation ended (the supervisor's listener): queue it if served here and
        the operator opted in."""
        if served != "local" or not self._node.config.telemetry.enabled:
            return
        reading = self._node.own_telemetry()
        backends = reading.resources.backends if reading is not None else ()
        base = FieldSample(
            model_id=model_id,
            hardware_class=hardware_class(reading),
            engine=f"llama.cpp/{backends[0]}" if backends else "llama.cpp/cpu",
        )
        match chunk:
            case FinishChunk(stats=stats):
                sample = msgspec.structs.replace(
                    base,
                    time_to_first_token_ms=stats.time_to_first_token_ms,
                    decode_tokens_per_second=stats.generation_tps or None,
                    prompt_tokens=chunk.prompt_tokens,
                    completion_tokens=chunk.completion_tokens,
                )
            case ErrorChunk(code=code):
                sample = msgspec.structs.replace(base, failure_class=code)
            case _:
                return
        if len(self._pending) >= MAX_PENDING_SAMPLES:
            self._pending.popleft()
            self.dropped_since_start += 1
        self._pending.append(sample)
