"""The speech routes: ``POST /v1/audio/speech``, ``GET /v1/audio/voices``,
``POST /v1/audio/transcriptions`` and ``POST /v1/audio/translations`` (the logic is
:mod:`skulk_daemon.speech.service`).

Transcription bodies are multipart uploads bounded at 25 MiB of audio (413 beyond);
a ``file`` field that is a string (a server path) is refused. A client that
disconnects while its audio is worked on cancels the work on the runner.
"""

from __future__ import annotations

from typing import Final

from litestar import Controller, Response, get, post
from litestar.datastructures import FormMultiDict, UploadFile
from litestar.response import Stream

from skulk_core.audio.formats import (
    HEADER_CHANNELS,
    HEADER_SAMPLE_FORMAT,
    HEADER_SAMPLE_RATE,
    MAX_AUDIO_UPLOAD_BYTES,
    SPEECH_MEDIA_TYPES,
    TRANSCRIPT_MEDIA_TYPES,
    pcm_headers,
)
from skulk_core.audio.subtitles import TranscriptSegment
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.embeddings import unless_disconnected
from skulk_daemon.api.openapi import (
    COMMAND_ID_HEADER,
    JSON,
    OPENAI,
    documented,
    errors,
    json_of,
    lines_of,
    raw_of,
    sse_of,
)
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.embeddings.service import STATUS_CANCELLED
from skulk_daemon.errors import ApiError
from skulk_daemon.errors import bad_request as _bad
from skulk_daemon.speech.protocol import (
    SpeechRequest,
    Transcription,
    TranscriptionUpload,
    VerboseTranscription,
    VoiceList,
    decode_speech_request,
)
from skulk_daemon.speech.service import SpeechBody, SpeechService, TranscriptionForm
from skulk_daemon.speech.streaming import audio_chunks, transcript_events, transcript_lines

MAX_SPEECH_BODY_BYTES: Final = 1024 * 1024
"""4,096 characters of input and a few options, with room for JSON escaping."""
MAX_UPLOAD_BODY_BYTES: Final = MAX_AUDIO_UPLOAD_BYTES + 1024 * 1024
"""The 25 MiB file plus the form's other fields and multipart framing."""
MULTIPART: Final = "multipart/form-data"
_TRUE: Final = frozenset({"true", "1"})
_FALSE: Final = frozenset({"false", "0", ""})


SPEECH_OK: Final = {
    media: raw_of(description=f"{fmt} audio", binary=True)
    for fmt, media in SPEECH_MEDIA_TYPES.items()
}
PCM_HEADERS: Final = {
    HEADER_SAMPLE_RATE: "pcm only: samples per second",
    HEADER_CHANNELS: "pcm only: channels (1)",
    HEADER_SAMPLE_FORMAT: "pcm only: s16le (signed 16-bit little-endian)",
}
TRANSCRIPT_DOC: Final = documented(
    body=TranscriptionUpload,
    body_media_types=(MULTIPART,),
    ok={
        "application/json": json_of(
            Transcription, VerboseTranscription, description="json or verbose_json"
        ),
        "text/plain": raw_of(description="the transcript", binary=False),
        "application/x-subrip": raw_of(description="SubRip subtitles", binary=False),
        "text/vtt": raw_of(description="WebVTT subtitles", binary=False),
        "application/x-ndjson": lines_of(
            TranscriptSegment, description="one line per transcript segment"
        ),
        "text/event-stream": sse_of(
            description="stream=true: transcription.delta, .completed, .usage, .error"
        ),
    },
    headers=COMMAND_ID_HEADER,
)


def _disconnected() -> ApiError:
    return ApiError(STATUS_CANCELLED, "the client disconnected", code="client_disconnected")


def _respond(body: SpeechBody) -> Response[bytes]:
    return Response(body.content, media_type=body.media_type, headers=body.headers)


def _text(form: FormMultiDict, name: str) -> str | None:
    value = form.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(f"{name} must be a form field, not a file")
    return value


def _number(form: FormMultiDict, name: str) -> float | None:
    value = _text(form, name)
    if value is None or value == "":
        return None
    try:
        return float(value)
    except ValueError:
        raise _bad(f"{name} must be a number, got {value!r}") from None


def _flag(form: FormMultiDict, name: str) -> bool:
    value = (_text(form, name) or "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _bad(f"{name} must be true or false, got {value!r}")


async def read_upload(request: HttpRequest) -> TranscriptionForm:
    """The multipart transcription form; 400 for anything but an uploaded ``file``."""
    if not request.headers.get("content-type", "").startswith(MULTIPART):
        raise _bad("this route takes multipart/form-data with an uploaded audio file")
    form = await request.form()
    upload = form.get("file")
    if upload is None:
        raise _bad("file is required: upload the audio as a multipart file")
    if not isinstance(upload, UploadFile):
        raise _bad("file must be an uploaded audio file; server-local paths are not accepted")
    audio = await upload.read(MAX_AUDIO_UPLOAD_BYTES + 1)
    return TranscriptionForm(
        model=_text(form, "model") or "",
        audio=audio,
        language=_text(form, "language"),
        prompt=_text(form, "prompt"),
        response_format=_text(form, "response_format"),
        temperature=_number(form, "temperature"),
        stream=_flag(form, "stream"),
    )


class AudioController(Controller):
    tags = ("OpenAI",)
    opt = declare(Requirement.OPEN)

    @post(
        "/v1/audio/speech",
        # JSON, or multipart for a card declaring reference audio (checked below).
        opt=declare(Requirement.OPEN, json_body=False),
        status_code=200,
        summary="OpenAI Audio Speech",
        request_max_body_size=MAX_SPEECH_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, 415, STATUS_CANCELLED, 503),
        operation_class=documented(
            body=SpeechRequest,
            body_media_types=(JSON, MULTIPART),
            ok=SPEECH_OK,
            headers={**COMMAND_ID_HEADER, **PCM_HEADERS},
        ),
    )
    async def create_speech(
        self, request: HttpRequest, speech: SpeechService
    ) -> Response[bytes] | Stream:
        content_type = request.headers.get("content-type", "")
        if content_type.startswith(MULTIPART):
            form = await request.form()
            upload = form.get("reference_audio")
            raise speech.refuse_reference_audio(
                _text(form, "model") or "",
                voice=bool(_text(form, "voice")),
                upload=isinstance(upload, UploadFile),
            )
        if not content_type.startswith(JSON):
            raise ApiError(
                415,
                "this route takes an application/json body (multipart/form-data only with "
                "reference_audio)",
                code="unsupported_media_type",
            )
        admitted = speech.admit_speech(decode_speech_request(await request.body()))
        if admitted.task.stream:
            headers = {"X-Skulk-Command-Id": str(admitted.command_id)}
            if admitted.response_format == "pcm" and admitted.sample_rate is not None:
                headers.update(pcm_headers(admitted.sample_rate))
            parts = speech.stream(admitted.command_id, admitted.instance_id, admitted.task)
            return Stream(
                audio_chunks(admitted, parts),
                media_type=SPEECH_MEDIA_TYPES[admitted.response_format],
                headers=headers,
            )
        outcome = await unless_disconnected(
            request, speech.run(admitted.command_id, admitted.instance_id, admitted.task)
        )
        if outcome is None:
            raise _disconnected()
        return _respond(await speech.speech_body(admitted, outcome[0]))

    @get(
        "/v1/audio/voices",
        summary="Skulk Audio Voices",
        responses=errors(OPENAI, 400, 404),
    )
    async def list_voices(self, speech: SpeechService, model: str | None = None) -> VoiceList:
        return speech.voices(model)

    @post(
        "/v1/audio/transcriptions",
        opt=declare(Requirement.OPEN, json_body=False),
        status_code=200,
        summary="OpenAI Audio Transcriptions",
        request_max_body_size=MAX_UPLOAD_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, STATUS_CANCELLED, 503),
        operation_class=TRANSCRIPT_DOC,
    )
    async def create_transcription(
        self, request: HttpRequest, speech: SpeechService
    ) -> Response[bytes] | Stream:
        return await self._transcribe(request, speech, translate=False)

    @post(
        "/v1/audio/translations",
        opt=declare(Requirement.OPEN, json_body=False),
        status_code=200,
        summary="OpenAI Audio Translations",
        request_max_body_size=MAX_UPLOAD_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, STATUS_CANCELLED, 503),
        operation_class=TRANSCRIPT_DOC,
    )
    async def create_translation(
        self, request: HttpRequest, speech: SpeechService
    ) -> Response[bytes] | Stream:
        return await self._transcribe(request, speech, translate=True)

    @staticmethod
    async def _transcribe(
        request: HttpRequest, speech: SpeechService, *, translate: bool
    ) -> Response[bytes] | Stream:
        admitted = speech.admit_transcription(await read_upload(request), translate=translate)
        if admitted.task.stream:
            parts = speech.stream(admitted.command_id, admitted.instance_id, admitted.task)
            lines = admitted.response_format == "ndjson"
            return Stream(
                transcript_lines(parts) if lines else transcript_events(parts),
                media_type=TRANSCRIPT_MEDIA_TYPES["ndjson"] if lines else "text/event-stream",
                headers={
                    "X-Skulk-Command-Id": str(admitted.command_id),
                    "Cache-Control": "no-cache",
                },
            )
        outcome = await unless_disconnected(
            request, speech.run(admitted.command_id, admitted.instance_id, admitted.task)
        )
        if outcome is None:
            raise _disconnected()
        return _respond(speech.transcript_body(admitted, outcome[0]))
