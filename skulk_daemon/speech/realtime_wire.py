"""What a realtime session shows on the wire: its socket and participant faces, the
session views, how a provider failure maps to a failure body and a close code, and the
record of one utterance's provider call (:class:`Turn`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from skulk_core.audio.realtime_config import ConfigRefusal, SessionConfig
from skulk_core.audio.realtime_events import (
    CLOSE_INTERNAL,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    CLOSE_TRY_AGAIN,
    CLOSE_UNSUPPORTED_DATA,
    AudioView,
    BetaSessionView,
    ErrorBody,
    FormatView,
    InputView,
    ResponseView,
    ServerEvent,
    SessionView,
    TranscriptionView,
)
from skulk_core.extensions.capabilities import CapabilityError, CapabilityStreamSession
from skulk_core.ids import ModelId
from skulk_core.models.cards import ModelTask
from skulk_core.models.catalog import Catalog


class Connection(Protocol):
    """The socket, as the session sees it (the API layer adapts Litestar's)."""

    async def receive(self) -> str | bytes | None:
        """The next message; ``None`` once the client has gone."""
        ...

    async def send(self, text: str) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...


Emit = Callable[[ServerEvent], Awaitable[None]]


class Responder(Protocol):
    """The response participant (``session.response``): answers a final transcript."""

    def refuse(self, config: SessionConfig) -> ConfigRefusal | None:
        """Why ``config.response`` cannot be served, or ``None``."""
        ...

    async def respond(self, config: SessionConfig, transcript: str, emit: Emit) -> None:
        """Run one response, emitting its events; cancelled by the session."""
        ...


def _turns_json(config: SessionConfig) -> dict[str, object] | None:
    turns = config.turn_detection
    return None if turns is None else turns.to_json()


def session_view(session_id: str, config: SessionConfig) -> SessionView:
    response = config.response
    return SessionView(
        id=session_id,
        audio=AudioView(
            input=InputView(
                format=FormatView(),
                transcription=TranscriptionView(model=config.model),
                turn_detection=_turns_json(config),
            )
        ),
        response=None
        if response is None
        else ResponseView(
            model=response.model,
            tts_model=response.tts_model,
            voice=response.voice,
            max_output_tokens=response.max_output_tokens,
            enable_thinking=response.enable_thinking,
        ),
    )


def beta_view(session_id: str, config: SessionConfig) -> BetaSessionView:
    return BetaSessionView(
        id=session_id,
        input_audio_transcription=TranscriptionView(model=config.model),
        turn_detection=_turns_json(config),
    )


def failure_body(error: CapabilityError) -> ErrorBody:
    return ErrorBody(type="transcription_error", code=error.code, message=error.message)


def close_code(error: CapabilityError) -> int:
    """The close code of a provider failure: retryable capacity, policy, or internal."""
    match error.code:
        case "overloaded" | "unreachable" | "not_found" | "timeout":
            return CLOSE_TRY_AGAIN
        case "invalid_payload" | "version_mismatch" | "revision_mismatch":
            return CLOSE_POLICY
        case _:
            return CLOSE_INTERNAL


def close_name(code: int) -> str:
    """The ``error`` event code sent just before a close."""
    return {
        CLOSE_UNSUPPORTED_DATA: "unsupported_data",
        CLOSE_POLICY: "policy_violation",
        CLOSE_TOO_BIG: "message_too_big",
        CLOSE_TRY_AGAIN: "capacity_unavailable",
    }.get(code, "closed")


def model_refusal(catalog: Catalog, model: str) -> str | None:
    """Why ``model`` cannot back a realtime session (card truth), or ``None``."""
    if not model:
        return "the model query parameter is required"
    entry = catalog.get(ModelId(model))
    if entry is None:
        return f"model {model} is not in this node's catalog"
    audio = entry.card.audio
    if ModelTask.SPEECH_TO_TEXT not in entry.card.tasks or audio is None:
        return f"model {model} is not a speech-to-text model"
    if not audio.supports_realtime:
        return f"model {model} does not declare realtime transcription (audio.supports_realtime)"
    return None


@dataclass(slots=True)
class Turn:
    """One utterance's provider call, as the session tracks it."""

    item_id: str
    stream: CapabilityStreamSession
    reader: asyncio.Task[None] | None = None
    committed: bool = False
    by_vad: bool = False
    sent_bytes: int = 0
    pending: list[str] = field(default_factory=list)
    pending_bytes: int = 0
    done: bool = False
    announced: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once ``committed`` went out (and the held deltas after it)."""
