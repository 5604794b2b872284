"""Streamed speech bodies: chunked audio as a runner speaks each sentence, and a
transcription's typed SSE events (or NDJSON lines) as each segment is decoded.

Once the first byte has gone out the status cannot change: a failure mid-stream ends
the audio body early (and is logged), and ends an SSE stream with
``transcription.error``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Final

import msgspec

from skulk_core.audio.subtitles import TranscriptSegment
from skulk_core.chat.generation import ErrorChunk
from skulk_daemon.runner.client import Answer
from skulk_daemon.runner.protocol import SpeechPartial, Synthesized, Transcribed
from skulk_daemon.speech.encode import StreamEncoder
from skulk_daemon.speech.service import AdmittedSpeech
from skulk_daemon.speech.transcripts import ndjson_line

log = logging.getLogger("skulk.speech")

EVENT_DELTA: Final = "transcription.delta"
EVENT_COMPLETED: Final = "transcription.completed"
EVENT_USAGE: Final = "transcription.usage"
EVENT_ERROR: Final = "transcription.error"
_empty: Final = TranscriptSegment(id=0, start=0.0, end=0.0, text="")


async def audio_chunks(
    admitted: AdmittedSpeech, parts: AsyncIterator[SpeechPartial | Answer]
) -> AsyncIterator[bytes]:
    """Each sentence's audio, encoded (mp3) or raw (pcm), as the runner sends it."""
    assert admitted.sample_rate is not None  # admission refuses a card without one
    encoder = StreamEncoder(admitted.response_format, admitted.sample_rate)
    async for item in parts:
        match item:
            case SpeechPartial(pcm=pcm):
                chunk = encoder.feed(pcm)
                if chunk:
                    yield chunk
            case Synthesized():
                tail = encoder.close()
                if tail:
                    yield tail
            case ErrorChunk(code=code, message=message):
                log.warning("streamed speech ended early (%s): %s", code, message)
            case _:
                log.warning("streamed speech: the runner answered out of kind")


def sse(event: str, payload: dict[str, object]) -> bytes:
    body = msgspec.json.encode({"type": event, **payload})
    return f"event: {event}\n".encode() + b"data: " + body + b"\n\n"


async def transcript_events(parts: AsyncIterator[SpeechPartial | Answer]) -> AsyncIterator[bytes]:
    """``transcription.delta`` per decoded segment, then ``transcription.completed`` and
    ``transcription.usage``; or ``transcription.error``. The deltas concatenate to the
    completed text."""
    first = True
    async for item in parts:
        match item:
            case SpeechPartial(segment=segment) if segment is not None and segment.text:
                yield sse(EVENT_DELTA, {"delta": segment.text if first else f" {segment.text}"})
                first = False
            case SpeechPartial():
                pass
            case Transcribed(text=text, duration=duration, language=language):
                yield sse(EVENT_COMPLETED, {"text": text, "language": language})
                yield sse(EVENT_USAGE, {"usage": {"type": "duration", "seconds": duration}})
            case ErrorChunk(code=code, message=message):
                yield sse(EVENT_ERROR, {"error": {"code": code, "message": message}})
            case _:
                yield sse(
                    EVENT_ERROR, {"error": {"code": "engine_failed", "message": "bad answer"}}
                )


async def transcript_lines(parts: AsyncIterator[SpeechPartial | Answer]) -> AsyncIterator[bytes]:
    """One NDJSON line per decoded segment (the non-streamed ndjson shape)."""
    sent = False
    async for item in parts:
        match item:
            case SpeechPartial(segment=segment) if segment is not None:
                sent = True
                yield ndjson_line(segment)
            case Transcribed(segments=segments) if not segments and not sent:
                yield ndjson_line(
                    msgspec.structs.replace(_empty, end=item.duration, text=item.text)
                )
            case ErrorChunk(code=code, message=message):
                yield msgspec.json.encode({"error": {"code": code, "message": message}}) + b"\n"
            case _:
                pass
