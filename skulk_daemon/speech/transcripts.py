"""A finished transcription in the format the caller asked for (``response_format``):
OpenAI's JSON and verbose JSON, plain text, SubRip, WebVTT, or NDJSON cues."""

from __future__ import annotations

import msgspec

from skulk_core.audio.formats import TranscriptFormat
from skulk_core.audio.subtitles import TranscriptSegment, render_srt, render_vtt
from skulk_daemon.runner.protocol import Transcribed
from skulk_daemon.speech.protocol import (
    Transcription,
    VerboseSegment,
    VerboseTranscription,
)


def render_transcript(result: Transcribed, fmt: TranscriptFormat, *, translate: bool) -> bytes:
    match fmt:
        case "json":
            return msgspec.json.encode(Transcription(text=result.text))
        case "text":
            return result.text.encode("utf-8")
        case "verbose_json":
            return msgspec.json.encode(
                VerboseTranscription(
                    task="translate" if translate else "transcribe",
                    language=result.language,
                    duration=result.duration,
                    text=result.text,
                    segments=[
                        VerboseSegment(id=s.id, start=s.start, end=s.end, text=s.text)
                        for s in result.segments
                    ],
                )
            )
        case "srt":
            return render_srt(result.segments, result.text).encode("utf-8")
        case "vtt":
            return render_vtt(result.segments, result.text).encode("utf-8")
        case "ndjson":
            return b"".join(ndjson_line(s) for s in _cues(result))


def _cues(result: Transcribed) -> tuple[TranscriptSegment, ...]:
    if result.segments:
        return result.segments
    return (TranscriptSegment(id=0, start=0.0, end=result.duration, text=result.text),)


def ndjson_line(segment: TranscriptSegment) -> bytes:
    """One transcription chunk as an NDJSON line: its text and where it lies."""
    return msgspec.json.encode(segment) + b"\n"
