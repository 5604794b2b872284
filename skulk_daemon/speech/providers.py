"""The built-in ``tts@1.0.0`` and ``stt@1.0.0`` providers: speech for the capability fabric.

Both are facades over :class:`~skulk_daemon.speech.service.SpeechService`, not a second
runtime: a call is admitted exactly as the HTTP routes admit a request (the same
cards, voices, bounds and refusals) and runs as the same task on the same runner.

- ``tts@1.0.0`` (server streaming) opens with ``model`` and ``text``; each sentence's
  MP3 comes back as one chunk (payload ``model``, ``format: "mp3"``, ``chunk_index``,
  ``is_partial``, ``sample_rate``; the bytes as inline ``audio/mpeg`` media).
- ``stt@1.0.0`` (client streaming, batch inference) opens with ``model`` and optional
  hints; the caller sends the clip as ordered inline media (at most 1 MiB a frame,
  25 MiB in all), then completes its input; the completed payload holds ``model``,
  ``text``, ``language`` and ``segments``. No partial transcripts.

:class:`SpeechTags` advertises the ``tts`` and ``stt`` telemetry tags exactly while a
mounted model can serve them. A caller that goes away cancels the runner's task.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Final

from skulk_core.audio.formats import MAX_AUDIO_UPLOAD_BYTES
from skulk_core.chat.generation import ErrorChunk
from skulk_core.cluster.routing import select_instance
from skulk_core.extensions.capabilities import (
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    CapabilityStreamFrame,
    InlineMediaAttachment,
    JsonObject,
)
from skulk_core.ids import ModelId
from skulk_core.models.cards import ModelTask
from skulk_core.models.catalog import Catalog
from skulk_core.state.shards import RunnerReady, RunnerRunning
from skulk_daemon.capabilities.frames import OutputFrames
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import Node
from skulk_daemon.runner.protocol import SpeechPartial, Transcribed
from skulk_daemon.speech.encode import StreamEncoder
from skulk_daemon.speech.protocol import SpeechRequest
from skulk_daemon.speech.service import SpeechService, TranscriptionForm

TTS_ID: Final = "tts"
STT_ID: Final = "stt"
VERSION: Final = "1.0.0"
MAX_FRAME_MEDIA_BYTES: Final = 1024 * 1024
"""The fabric's per-frame media bound."""
MAX_SEED: Final = 2**32 - 1

_NUMBER: Final[JsonObject] = {"type": "number"}
_TEXT: Final[JsonObject] = {"type": "string"}

TTS_DESCRIPTOR: Final = CapabilityDescriptor(
    id=TTS_ID,
    version=VERSION,
    title="Text to speech (mounted models)",
    description=(
        "Speaks text with a mounted text-to-speech model. Open with {'model': <mounted TTS "
        "model id>, 'text': <text>} plus optional voice and speed; each output chunk is one "
        "piece of MP3 as inline audio/mpeg media, its payload {'model', 'format': 'mp3', "
        "'chunk_index', 'is_partial', 'sample_rate'}. Chunks concatenate to one MP3 stream."
    ),
    input_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["model", "text"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "text": {"type": "string", "minLength": 1},
            "response_format": {"enum": ["mp3"]},
            "voice": _TEXT,
            "streaming_interval": {"type": "number", "exclusiveMinimum": 0},
            "speed": {"type": "number", "exclusiveMinimum": 0},
            "instruct": _TEXT,
            "lang_code": _TEXT,
            "temperature": _NUMBER,
            "top_p": _NUMBER,
            "repetition_penalty": _NUMBER,
            "top_k": {"type": "integer"},
            "max_tokens": {"type": "integer", "minimum": 1},
            "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
        },
    },
    output_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["model", "chunks"],
        "properties": {"model": _TEXT, "chunks": {"type": "integer", "minimum": 0}},
    },
    io_mode="server_streaming",
    output_chunk_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["model", "format", "chunk_index", "is_partial"],
        "properties": {
            "model": _TEXT,
            "format": {"const": "mp3"},
            "chunk_index": {"type": "integer", "minimum": 0},
            "is_partial": {"type": "boolean"},
            "sample_rate": {"type": "integer", "minimum": 1},
        },
    },
)

STT_DESCRIPTOR: Final = CapabilityDescriptor(
    id=STT_ID,
    version=VERSION,
    title="Speech to text (mounted models, batch)",
    description=(
        "Transcribes one bounded audio clip with a mounted speech-to-text model. Open with "
        "{'model': <mounted STT model id>} plus optional filename, content_type, language, "
        "prompt and temperature; send the clip's bytes (any common container: WAV, MP3, "
        "FLAC, OGG, WebM, MP4) as ordered inline media, at most 1 MiB a chunk and 25 MiB "
        "in all; then complete the input. The completed payload is {'model', 'text', "
        "'language', 'segments'}. Batch: no partial transcripts."
    ),
    input_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["model"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "filename": _TEXT,
            "content_type": _TEXT,
            "language": _TEXT,
            "prompt": _TEXT,
            "context": _TEXT,
            "text": _TEXT,
            "temperature": _NUMBER,
            "max_tokens": {"type": "integer", "minimum": 1},
            "chunk_duration": _NUMBER,
            "frame_threshold": _NUMBER,
            "prefill_step_size": {"type": "integer", "minimum": 1},
            "word_timestamps": {"type": "boolean"},
            "timestamp_granularities": {"type": ["string", "array"]},
        },
    },
    output_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["model", "text"],
        "properties": {
            "model": _TEXT,
            "text": _TEXT,
            "language": _TEXT,
            "segments": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "start", "end", "text"],
                    "properties": {
                        "id": {"type": "integer"},
                        "start": _NUMBER,
                        "end": _NUMBER,
                        "text": _TEXT,
                    },
                },
            },
        },
    },
    io_mode="client_streaming",
    input_chunk_schema={"type": "object"},
)


def _refused(error: ApiError) -> CapabilityError:
    """An HTTP-shaped refusal as the provider's opening or call error."""
    if error.status_code == 413:
        return CapabilityError(code="payload_too_large", message=error.message)
    if error.status_code == 503:
        return CapabilityError(code="unreachable", message=error.message)
    return CapabilityError(code="invalid_payload", message=error.message)


def _runner_error(error: ErrorChunk) -> CapabilityError:
    if error.code == "invalid_request":
        return CapabilityError(code="invalid_payload", message=error.message)
    return CapabilityError(code="provider_error", message=error.message)


def _speech_request(payload: JsonObject) -> SpeechRequest:
    def number(name: str) -> float | None:
        value = payload.get(name)
        return float(value) if isinstance(value, int | float) else None

    voice = payload.get("voice")
    seed = payload.get("seed")
    return SpeechRequest(
        model=str(payload.get("model", "")),
        input=str(payload.get("text", "")),
        voice=voice if isinstance(voice, str) else None,
        speed=number("speed"),
        response_format="mp3",
        stream=True,
        streaming_interval=number("streaming_interval"),
        seed=seed if isinstance(seed, int) else None,
    )


class TtsProvider:
    """The first-party ``tts@1.0.0`` provider over the node's speech service."""

    name = "skulk.tts"

    def __init__(self, speech: SpeechService) -> None:
        self._speech = speech

    def capabilities(self) -> list[CapabilityDescriptor]:
        return [TTS_DESCRIPTOR]

    def admit_stream(self, context: object, call: CapabilityCall) -> CapabilityError | None:
        try:
            self._speech.admit_speech(_speech_request(call.payload))
        except ApiError as exc:
            return _refused(exc)
        return None

    async def handle_stream(
        self, context: object, call: CapabilityCall
    ) -> AsyncIterator[CapabilityStreamFrame]:
        out = OutputFrames(call.call_id)
        try:
            admitted = self._speech.admit_speech(_speech_request(call.payload))
        except ApiError as exc:
            yield out("failed", error=_refused(exc))
            return
        model = str(call.payload["model"])
        rate = admitted.sample_rate or 0
        encoder = StreamEncoder("mp3", rate)
        index = 0

        def chunk(data: bytes, partial: bool) -> CapabilityStreamFrame:
            payload: JsonObject = {
                "model": model,
                "format": "mp3",
                "chunk_index": index,
                "is_partial": partial,
                "sample_rate": rate,
            }
            return out(
                "chunk", payload, media=InlineMediaAttachment(data=data, media_type="audio/mpeg")
            )

        async for item in self._speech.stream(
            admitted.command_id, admitted.instance_id, admitted.task
        ):
            if isinstance(item, SpeechPartial):
                data = encoder.feed(item.pcm)
                final = False
            elif isinstance(item, ErrorChunk):
                yield out("failed", error=_runner_error(item))
                return
            else:
                data = encoder.close()
                final = True
            for start in range(0, len(data), MAX_FRAME_MEDIA_BYTES):
                piece = data[start : start + MAX_FRAME_MEDIA_BYTES]
                last = final and start + MAX_FRAME_MEDIA_BYTES >= len(data)
                yield chunk(piece, not last)
                index += 1
        yield out("completed", {"model": model, "chunks": index})


class SttProvider:
    """The first-party ``stt@1.0.0`` provider over the node's speech service."""

    name = "skulk.stt"

    def __init__(self, speech: SpeechService) -> None:
        self._speech = speech

    def capabilities(self) -> list[CapabilityDescriptor]:
        return [STT_DESCRIPTOR]

    def admit_stream(self, context: object, call: CapabilityCall) -> CapabilityError | None:
        try:
            # A one-byte stand-in clip: everything but the audio itself is checked now.
            self._speech.admit_transcription(_form(call.payload, b"\0"), translate=False)
        except ApiError as exc:
            return _refused(exc)
        return None

    async def handle_input_stream(
        self,
        context: object,
        call: CapabilityCall,
        input_frames: AsyncIterator[CapabilityStreamFrame],
    ) -> AsyncIterator[CapabilityStreamFrame]:
        out = OutputFrames(call.call_id)
        clip = bytearray()
        async for item in input_frames:
            if item.kind == "started":
                continue
            if item.kind != "chunk":
                break  # the caller completed its input
            media = item.media
            if not isinstance(media, InlineMediaAttachment) or not media.data:
                message = "each chunk carries part of the clip as non-empty inline media"
                yield out("failed", error=CapabilityError(code="invalid_payload", message=message))
                return
            if len(media.data) > MAX_FRAME_MEDIA_BYTES:
                message = f"a chunk carries at most {MAX_FRAME_MEDIA_BYTES} bytes of media"
                yield out(
                    "failed", error=CapabilityError(code="payload_too_large", message=message)
                )
                return
            if len(clip) + len(media.data) > MAX_AUDIO_UPLOAD_BYTES:
                message = "the clip exceeds 25 MiB"
                yield out(
                    "failed", error=CapabilityError(code="payload_too_large", message=message)
                )
                return
            clip.extend(media.data)
        if not clip:
            message = "no audio was sent before the input completed"
            yield out("failed", error=CapabilityError(code="invalid_payload", message=message))
            return
        try:
            admitted = self._speech.admit_transcription(
                _form(call.payload, bytes(clip)), translate=False
            )
        except ApiError as exc:
            yield out("failed", error=_refused(exc))
            return
        result = await self._speech.run(admitted.command_id, admitted.instance_id, admitted.task)
        if isinstance(result, ErrorChunk):
            yield out("failed", error=_runner_error(result))
            return
        if not isinstance(result, Transcribed):
            message = "the runner answered out of kind"
            yield out("failed", error=CapabilityError(code="provider_error", message=message))
            return
        segments: list[object] = [
            {"id": s.id, "start": s.start, "end": s.end, "text": s.text} for s in result.segments
        ]
        yield out(
            "completed",
            {
                "model": str(call.payload["model"]),
                "text": result.text,
                "language": result.language,
                "segments": segments,
            },
        )


def _form(payload: JsonObject, clip: bytes) -> TranscriptionForm:
    def text(name: str) -> str | None:
        value = payload.get(name)
        return value if isinstance(value, str) else None

    temperature = payload.get("temperature")
    return TranscriptionForm(
        model=str(payload.get("model", "")),
        audio=clip,
        language=text("language"),
        prompt=text("prompt"),
        temperature=float(temperature) if isinstance(temperature, int | float) else None,
    )


class SpeechTags:
    """Advertises ``tts`` while a mounted TTS card streams MP3 and every instance of it
    is ready, and ``stt`` while a ready single-host STT runner is mounted; both are
    rechecked after every applied batch of events."""

    def __init__(
        self, node: Node, advertise: Callable[[str], None], withdraw: Callable[[str], None]
    ) -> None:
        self._node = node
        self._advertise = advertise
        self._withdraw = withdraw

    def refresh(self) -> None:
        # NOTE: one catalog per refresh: this runs after every applied batch of events.
        catalog = self._node.catalog()
        wanted = {TTS_ID: self._tts_ready(catalog), STT_ID: self._stt_ready(catalog)}
        for tag, on in wanted.items():
            (self._advertise if on else self._withdraw)(tag)

    @staticmethod
    def _models(catalog: Catalog, task: ModelTask) -> list[ModelId]:
        return [
            ModelId(model_id)
            for model_id, entry in catalog.by_id.items()
            if task in entry.card.tasks and entry.card.audio is not None
        ]

    def _all_ready(self, model_id: ModelId) -> bool:
        state = self._node.state
        instances = [
            i for i in state.instances.values() if i.shard_assignments.model_id == model_id
        ]
        return bool(instances) and all(
            isinstance(state.runners.get(runner_id), RunnerReady | RunnerRunning)
            for instance in instances
            for runner_id in instance.shard_assignments.runner_to_shard
        )

    def _tts_ready(self, catalog: Catalog) -> bool:
        for model_id in self._models(catalog, ModelTask.TEXT_TO_SPEECH):
            audio = catalog.by_id[model_id].card.audio
            assert audio is not None
            streams_mp3 = audio.supports_streaming and (
                not audio.response_formats or "mp3" in audio.response_formats
            )
            if streams_mp3 and self._all_ready(model_id):
                return True
        return False

    def _stt_ready(self, catalog: Catalog) -> bool:
        state = self._node.state
        for model_id in self._models(catalog, ModelTask.SPEECH_TO_TEXT):
            instance = select_instance(state, model_id)
            if instance is None or len(instance.shard_assignments.runner_to_shard) != 1:
                continue
            if self._all_ready(model_id):
                return True
        return False
