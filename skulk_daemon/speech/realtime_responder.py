"""The realtime edge's response participant: a final transcript answered by a chat model,
then optionally spoken by a TTS model.

Configured by ``session.response`` (``model``, optional ``tts_model`` and ``voice``,
``max_output_tokens`` 1-4096, ``enable_thinking`` default false). Each final transcript
becomes the next user message of this socket's bounded text-only history
(:data:`MAX_HISTORY_MESSAGES` messages, :data:`MAX_HISTORY_CHARS` characters; the oldest
go first) and runs as an ordinary turn of the node's chat service, so admission, the
chat hooks, cancellation and ``/state`` are a typed chat request's. Visible text
streams as ``response.output_text.delta`` (reasoning is never exposed), then
``response.output_text.done``; with a ``tts_model`` the final text is synthesized by a
normal ``tts@1.0.0`` Fabric provider stream (MP3) on the node whose runner serves it
(this one first, else a reachable peer) as ``response.audio.delta`` / ``done``.
A reply with nothing a voice can speak (only punctuation or symbols) is answered
as text alone: no audio events, ``completed``. ``response.done`` ends every response:
``completed``, ``cancelled`` (the session cancelled it: ``response.cancel``, new
speech, a new turn or a disconnect) or ``failed`` (after an ``error`` event; the
socket stays open). Media never enters the
history or State.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
from collections import deque
from collections.abc import AsyncIterator
from typing import Final, Literal

from skulk_core.audio.formats import MAX_SPEECH_INPUT_CHARS
from skulk_core.audio.realtime_config import ConfigRefusal, SessionConfig
from skulk_core.audio.realtime_events import (
    ErrorBody,
    ErrorEvent,
    ResponseAudioDelta,
    ResponseAudioDone,
    ResponseBody,
    ResponseCreated,
    ResponseDone,
    ResponseTextDelta,
    ResponseTextDone,
)
from skulk_core.extensions.capabilities import (
    InlineMediaAttachment,
    JsonObject,
    descriptor_revision,
)
from skulk_core.ids import ModelId
from skulk_core.models.cards import ModelTask
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.chat.service import ChatService
from skulk_daemon.chat.task import ChatTask, TaskMessage
from skulk_daemon.chat.turn import ContentDelta, TurnEnd, TurnError, TurnEvent
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import Node
from skulk_daemon.speech.providers import TTS_DESCRIPTOR, TTS_ID
from skulk_daemon.speech.realtime_route import pick_node
from skulk_daemon.speech.realtime_wire import Emit

MAX_HISTORY_MESSAGES: Final = 16
MAX_HISTORY_CHARS: Final = 16_000
Status = Literal["completed", "cancelled", "failed"]


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


class _Failed(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ChatResponder:
    """One socket's response participant and its bounded history."""

    def __init__(
        self, node: Node, chat: ChatService, capabilities: CapabilityService | None
    ) -> None:
        self._node = node
        self._chat = chat
        self._capabilities = capabilities
        self._history: deque[TaskMessage] = deque()

    def refuse(self, config: SessionConfig) -> ConfigRefusal | None:
        response = config.response
        if response is None:
            return None
        catalog = self._node.catalog()
        chat = catalog.get(ModelId(response.model))
        if chat is None or ModelTask.TEXT_GENERATION not in chat.card.tasks:
            return ConfigRefusal(
                "invalid_response",
                f"response.model {response.model} is not a mounted chat model",
                "session.response.model",
            )
        if response.tts_model is None:
            if response.voice is not None:
                return ConfigRefusal(
                    "invalid_response",
                    "response.voice needs a response.tts_model",
                    "session.response.voice",
                )
            return None
        tts = catalog.get(ModelId(response.tts_model))
        audio = tts.card.audio if tts is not None else None
        if tts is None or ModelTask.TEXT_TO_SPEECH not in tts.card.tasks or audio is None:
            return ConfigRefusal(
                "invalid_response",
                f"response.tts_model {response.tts_model} is not a mounted text-to-speech model",
                "session.response.tts_model",
            )
        if not audio.supports_streaming or (
            audio.response_formats and "mp3" not in audio.response_formats
        ):
            return ConfigRefusal(
                "invalid_response",
                f"response.tts_model {response.tts_model} does not stream MP3",
                "session.response.tts_model",
            )
        if response.voice is not None and response.voice not in {v.id for v in audio.voices}:
            return ConfigRefusal(
                "invalid_response",
                f"unknown voice {response.voice!r} for {response.tts_model}",
                "session.response.voice",
            )
        if self._capabilities is None:
            return ConfigRefusal(
                "invalid_response",
                "this node has no capability fabric for speech",
                "session.response.tts_model",
            )
        return None

    def _remember(self, message: TaskMessage) -> None:
        self._history.append(message)
        while len(self._history) > MAX_HISTORY_MESSAGES or (
            len(self._history) > 1
            and sum(len(m.content) for m in self._history) > MAX_HISTORY_CHARS
        ):
            self._history.popleft()

    async def respond(self, config: SessionConfig, transcript: str, emit: Emit) -> None:
        response = config.response
        if response is None:
            return
        response_id = _id("resp")
        await emit(
            ResponseCreated(
                event_id=_id("event"),
                response=ResponseBody(id=response_id, status="in_progress"),
            )
        )
        text = ""
        status: Status = "completed"
        try:
            self._remember(TaskMessage(role="user", content=transcript[:MAX_HISTORY_CHARS]))
            text = await self._answer(config, response_id, emit)
            await emit(ResponseTextDone(event_id=_id("event"), response_id=response_id, text=text))
            self._remember(TaskMessage(role="assistant", content=text))
            if response.tts_model is not None and text:
                await self._speak(config, response_id, text, emit)
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        except _Failed as failure:
            status = "failed"
            await emit(
                ErrorEvent(
                    event_id=_id("event"),
                    error=ErrorBody(
                        type="response_error", code=failure.code, message=failure.message
                    ),
                )
            )
        finally:
            # NOTE: sent even when cancelled: the session awaits this task's end.
            await emit(
                ResponseDone(
                    event_id=_id("event"),
                    response=ResponseBody(id=response_id, status=status, output_text=text),
                )
            )

    async def _answer(self, config: SessionConfig, response_id: str, emit: Emit) -> str:
        response = config.response
        assert response is not None
        task = ChatTask(
            model=response.model,
            messages=tuple(self._history),
            max_tokens=response.max_output_tokens,
            enable_thinking=response.enable_thinking,
        )
        try:
            turn = await self._chat.open_turn(task)
        except ApiError as exc:
            raise _Failed(exc.code or "response_refused", exc.message) from None
        pieces: list[str] = []

        async def shaped() -> AsyncIterator[bytes]:
            events: AsyncIterator[TurnEvent] = turn.events
            async for event in events:
                match event:
                    case ContentDelta(text=delta) if delta:
                        pieces.append(delta)
                        await emit(
                            ResponseTextDelta(
                                event_id=_id("event"), response_id=response_id, delta=delta
                            )
                        )
                    case TurnError(code=code, message=message):
                        raise _Failed(code, message)
                    case TurnEnd():
                        break
                    case _:
                        pass  # reasoning and keep-alives are not exposed
                yield b""

        body = turn.respond(shaped())
        try:
            async for _ in body:
                pass
        finally:
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
        return "".join(pieces).strip()

    async def _speak(self, config: SessionConfig, response_id: str, text: str, emit: Emit) -> None:
        response = config.response
        fabric = self._capabilities
        assert response is not None and response.tts_model is not None and fabric is not None
        target = pick_node(self._node, fabric, response.tts_model, TTS_ID, single_host=False)
        if target is None:
            raise _Failed(
                "capacity_unavailable", f"no ready runner of {response.tts_model} in the cluster"
            )
        payload: JsonObject = {
            "model": response.tts_model,
            "text": text[:MAX_SPEECH_INPUT_CHARS],
            "response_format": "mp3",
        }
        if response.voice is not None:
            payload["voice"] = response.voice
        # A normal tts@1.0.0 provider stream, on this node or the one whose runner
        # serves the model; closing it early (a cancelled response) cancels it there.
        stream = await fabric.stream(
            target, TTS_ID, TTS_DESCRIPTOR.version, descriptor_revision(TTS_DESCRIPTOR), payload
        )
        if not stream.open_result.ok:
            error = stream.open_result.error
            raise _Failed(
                error.code if error is not None else "speech_refused",
                error.message if error is not None else "the tts provider refused the call",
            )
        frames = stream.frames
        spoken = False
        try:
            async for frame in frames:
                match frame.kind:
                    case "chunk":
                        media = frame.media
                        if isinstance(media, InlineMediaAttachment) and media.data:
                            spoken = True
                            await emit(
                                ResponseAudioDelta(
                                    event_id=_id("event"),
                                    response_id=response_id,
                                    delta=base64.b64encode(media.data).decode(),
                                )
                            )
                    case "completed":
                        break
                    case "started":
                        continue
                    case _:
                        error = frame.error
                        if not spoken and error is not None and error.code == "invalid_payload":
                            # The model, voice and format are the session's, checked at
                            # session.update: what the voice refused is the reply's text,
                            # which holds nothing it can speak. The answer stays text.
                            return
                        raise _Failed(
                            error.code if error is not None else "speech_failed",
                            error.message if error is not None else "the synthesis failed",
                        )
        finally:
            aclose = getattr(frames, "aclose", None)
            if aclose is not None:
                await aclose()
        await emit(ResponseAudioDone(event_id=_id("event"), response_id=response_id))
