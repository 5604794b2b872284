"""The realtime transcription WebSocket's wire: client and server events, bounds, close codes.

``WS /v1/realtime`` (and ``WS /v1/fabric/chains/speech``) speak a bounded subset of
OpenAI Realtime transcription as JSON text messages. Client events decode into the
tagged union :data:`ClientEvent` (by ``type``); a field the edge does not support is
an error, never ignored. Server events are the ``msgspec`` structs below, encoded with
their ``type`` tag. Pure: no sockets, no I/O.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

INPUT_SAMPLE_RATE: Final = 24_000
"""Version 1 input: base64 mono PCM16 (little-endian) at 24 kHz."""
MAX_AUDIO_FRAME_BYTES: Final = 1024 * 1024
"""One append's decoded audio."""
MAX_EVENT_BYTES: Final = 2 * 1024 * 1024
"""One encoded client event."""
MAX_SESSION_AUDIO_BYTES: Final = 64 * 1024 * 1024
"""Decoded audio across one WebSocket session."""
MAX_TRANSCRIPT_BYTES: Final = 1024 * 1024
"""Provider transcript text per event and in the pre-commit buffer."""
MAX_OUTPUT_TOKENS_RANGE: Final = (1, 4096)
DEFAULT_MAX_OUTPUT_TOKENS: Final = 256

CLOSE_NORMAL: Final = 1000
CLOSE_UNSUPPORTED_DATA: Final = 1003
"""A binary message (version 1 takes JSON text only)."""
CLOSE_POLICY: Final = 1008
"""A policy violation: the session's audio bound, a model that is not realtime."""
CLOSE_TOO_BIG: Final = 1009
"""An event over 2 MiB, an audio frame over 1 MiB."""
CLOSE_INTERNAL: Final = 1011
"""The provider failed (or its transcript overflowed)."""
CLOSE_TRY_AGAIN: Final = 1013
"""No ready capacity right now; retryable."""

Unset = msgspec.UnsetType
UNSET: Final = msgspec.UNSET


# -- client events ------------------------------------------------------------------


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class AudioFormat(_Strict, frozen=True):
    type: Literal["audio/pcm"]
    rate: int = INPUT_SAMPLE_RATE


class TranscriptionConfig(_Strict, frozen=True):
    model: str | Unset = UNSET
    language: str | Unset | None = UNSET
    prompt: str | Unset | None = UNSET


class ServerVadConfig(_Strict, frozen=True):
    type: Literal["server_vad"]
    aggressiveness: int | Unset = UNSET
    prefix_padding_ms: int | Unset = UNSET
    silence_duration_ms: int | Unset = UNSET
    minimum_speech_ms: int | Unset = UNSET
    maximum_utterance_ms: int | Unset = UNSET


class AudioInputConfig(_Strict, frozen=True):
    format: AudioFormat | Unset = UNSET
    transcription: TranscriptionConfig | Unset = UNSET
    turn_detection: ServerVadConfig | Unset | None = UNSET
    noise_reduction: dict[str, object] | Unset | None = UNSET


class AudioConfig(_Strict, frozen=True):
    input: AudioInputConfig | Unset = UNSET


class ResponseConfig(_Strict, frozen=True):
    model: str
    tts_model: str | None = None
    voice: str | None = None
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    enable_thinking: bool = False


class SessionPatch(_Strict, frozen=True):
    type: Literal["transcription"] | Unset = UNSET
    audio: AudioConfig | Unset = UNSET
    response: ResponseConfig | Unset | None = UNSET


class BetaSessionPatch(_Strict, frozen=True):
    """``transcription_session.update``'s session (the earlier transcription beta)."""

    input_audio_format: Literal["pcm16"] | Unset = UNSET
    input_audio_transcription: TranscriptionConfig | Unset | None = UNSET
    turn_detection: ServerVadConfig | Unset | None = UNSET
    input_audio_noise_reduction: dict[str, object] | Unset | None = UNSET


class SessionUpdate(_Strict, frozen=True, tag="session.update", tag_field="type"):
    session: SessionPatch
    event_id: str | None = None


class TranscriptionSessionUpdate(
    _Strict, frozen=True, tag="transcription_session.update", tag_field="type"
):
    session: BetaSessionPatch
    event_id: str | None = None


class AppendAudio(_Strict, frozen=True, tag="input_audio_buffer.append", tag_field="type"):
    audio: str
    event_id: str | None = None


class CommitAudio(_Strict, frozen=True, tag="input_audio_buffer.commit", tag_field="type"):
    event_id: str | None = None


class ClearAudio(_Strict, frozen=True, tag="input_audio_buffer.clear", tag_field="type"):
    """Decoded only to be refused with a reason (the edge keeps no replay buffer)."""

    event_id: str | None = None


class CancelResponse(_Strict, frozen=True, tag="response.cancel", tag_field="type"):
    event_id: str | None = None
    response_id: str | None = None


ClientEvent = (
    SessionUpdate
    | TranscriptionSessionUpdate
    | AppendAudio
    | CommitAudio
    | ClearAudio
    | CancelResponse
)

_client_decoder: Final = msgspec.json.Decoder(ClientEvent)


class InvalidEvent(ValueError):
    """A client message that is not one of the supported events; safe to show."""


def decode_client_event(text: str | bytes) -> ClientEvent:
    try:
        return _client_decoder.decode(text)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(f"unsupported or invalid client event: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InvalidEvent(f"a client event must be a JSON object: {exc}") from None


# -- server events ------------------------------------------------------------------


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    event_id: str


class FormatView(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["audio/pcm"] = "audio/pcm"
    rate: int = INPUT_SAMPLE_RATE


class TranscriptionView(msgspec.Struct, frozen=True, kw_only=True):
    model: str


class InputView(msgspec.Struct, frozen=True, kw_only=True):
    format: FormatView
    transcription: TranscriptionView
    turn_detection: dict[str, object] | None
    noise_reduction: None = None


class AudioView(msgspec.Struct, frozen=True, kw_only=True):
    input: InputView


class ResponseView(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    tts_model: str | None
    voice: str | None
    max_output_tokens: int
    enable_thinking: bool


class SessionView(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    audio: AudioView
    response: ResponseView | None
    object: Literal["realtime.transcription_session"] = "realtime.transcription_session"
    type: Literal["transcription"] = "transcription"


class BetaSessionView(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    input_audio_transcription: TranscriptionView
    turn_detection: dict[str, object] | None
    object: Literal["realtime.transcription_session"] = "realtime.transcription_session"
    input_audio_format: Literal["pcm16"] = "pcm16"
    input_audio_noise_reduction: None = None


class SessionCreated(_Event, frozen=True, kw_only=True, tag="session.created"):
    session: SessionView


class SessionUpdated(_Event, frozen=True, kw_only=True, tag="session.updated"):
    session: SessionView


class TranscriptionSessionUpdated(
    _Event, frozen=True, kw_only=True, tag="transcription_session.updated"
):
    session: BetaSessionView


class SpeechStartedEvent(
    _Event, frozen=True, kw_only=True, tag="input_audio_buffer.speech_started"
):
    audio_start_ms: int
    item_id: str


class SpeechStoppedEvent(
    _Event, frozen=True, kw_only=True, tag="input_audio_buffer.speech_stopped"
):
    audio_end_ms: int
    item_id: str


class Committed(_Event, frozen=True, kw_only=True, tag="input_audio_buffer.committed"):
    previous_item_id: str | None
    item_id: str


class TranscriptDelta(
    _Event, frozen=True, kw_only=True, tag="conversation.item.input_audio_transcription.delta"
):
    item_id: str
    delta: str
    content_index: int = 0


class TranscriptCompleted(
    _Event, frozen=True, kw_only=True, tag="conversation.item.input_audio_transcription.completed"
):
    item_id: str
    transcript: str
    content_index: int = 0


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    type: str
    code: str
    message: str
    param: str | None = None
    event_id: str | None = None


class TranscriptFailed(
    _Event, frozen=True, kw_only=True, tag="conversation.item.input_audio_transcription.failed"
):
    item_id: str
    error: ErrorBody
    content_index: int = 0


class ErrorEvent(_Event, frozen=True, kw_only=True, tag="error"):
    error: ErrorBody


class ResponseBody(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    status: Literal["in_progress", "completed", "cancelled", "failed"]
    output_text: str = ""
    object: Literal["realtime.response"] = "realtime.response"


class ResponseCreated(_Event, frozen=True, kw_only=True, tag="response.created"):
    response: ResponseBody


class ResponseTextDelta(_Event, frozen=True, kw_only=True, tag="response.output_text.delta"):
    response_id: str
    delta: str


class ResponseTextDone(_Event, frozen=True, kw_only=True, tag="response.output_text.done"):
    response_id: str
    text: str


class ResponseAudioDelta(_Event, frozen=True, kw_only=True, tag="response.audio.delta"):
    response_id: str
    delta: str
    """Base64 MP3."""


class ResponseAudioDone(_Event, frozen=True, kw_only=True, tag="response.audio.done"):
    response_id: str


class ResponseDone(_Event, frozen=True, kw_only=True, tag="response.done"):
    response: ResponseBody


ServerEvent = (
    SessionCreated
    | SessionUpdated
    | TranscriptionSessionUpdated
    | SpeechStartedEvent
    | SpeechStoppedEvent
    | Committed
    | TranscriptDelta
    | TranscriptCompleted
    | TranscriptFailed
    | ErrorEvent
    | ResponseCreated
    | ResponseTextDelta
    | ResponseTextDone
    | ResponseAudioDelta
    | ResponseAudioDone
    | ResponseDone
)

_server_encoder: Final = msgspec.json.Encoder()


def encode_server_event(event: ServerEvent) -> str:
    return _server_encoder.encode(event).decode()
