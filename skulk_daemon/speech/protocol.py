"""The speech wire types: ``POST /v1/audio/speech``'s JSON body and the transcript shapes."""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from skulk_core.audio.formats import TranscriptFormat
from skulk_daemon.errors import decode_json


class SpeechRequest(msgspec.Struct, frozen=True, kw_only=True):
    """OpenAI's speech request plus the spec's model-specific hints, decoded leniently
    (unknown fields are ignored, as OpenAI does). ``reference_audio`` decodes only so a
    JSON path string can be refused: reference media is a multipart upload or nothing."""

    model: str
    input: str
    voice: str | None = None
    speed: float | None = None
    response_format: str | None = None
    stream: bool = False
    streaming_interval: float | None = None
    instruct: str | None = None
    lang_code: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: float | None = None
    repetition_penalty: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    reference_audio: object | None = None
    reference_text: str | None = None


class Voice(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    id: str
    name: str
    model: str
    kind: Literal["builtin", "reference"]
    preferred_languages: list[str] | None = None


class VoiceList(msgspec.Struct, frozen=True, kw_only=True):
    data: list[Voice]
    object: Literal["list"] = "list"


class Transcription(msgspec.Struct, frozen=True, kw_only=True):
    """``response_format=json``."""

    text: str


class VerboseSegment(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    start: float
    end: float
    text: str


class VerboseTranscription(msgspec.Struct, frozen=True, kw_only=True):
    """``response_format=verbose_json``: the text plus the model's language and segments."""

    task: Literal["transcribe", "translate"]
    language: str
    duration: float
    text: str
    segments: list[VerboseSegment]


AudioFile = Annotated[
    str, msgspec.Meta(description="The audio file's bytes", extra_json_schema={"format": "binary"})
]


class TranscriptionUpload(msgspec.Struct, frozen=True, kw_only=True):
    """The multipart form of ``POST /v1/audio/transcriptions`` and ``/translations``
    (documentation: the route reads the form itself)."""

    file: AudioFile
    model: str
    language: str | None = None
    prompt: str | None = None
    response_format: TranscriptFormat = "json"
    temperature: float | None = None
    stream: bool = False


_decoder: Final = msgspec.json.Decoder(SpeechRequest)


def decode_speech_request(raw: bytes) -> SpeechRequest:
    return decode_json(raw, _decoder)
