"""Transcript segments rendered as SubRip (``srt``) and WebVTT (``vtt``)."""

from __future__ import annotations

import msgspec


class TranscriptSegment(msgspec.Struct, frozen=True, kw_only=True):
    """One timed stretch of a transcript, in seconds from the start of the audio."""

    id: int
    start: float
    end: float
    text: str


def _clock(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _cues(segments: tuple[TranscriptSegment, ...], text: str) -> tuple[TranscriptSegment, ...]:
    """The segments, or one zero-length cue holding ``text`` when there are none."""
    if segments:
        return segments
    return (TranscriptSegment(id=0, start=0.0, end=0.0, text=text),)


def render_srt(segments: tuple[TranscriptSegment, ...], text: str = "") -> str:
    """SubRip: numbered cues from 1, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, blank-line separated."""
    blocks = [
        f"{index}\n{_clock(cue.start, ',')} --> {_clock(cue.end, ',')}\n{cue.text.strip()}\n"
        for index, cue in enumerate(_cues(segments, text), start=1)
    ]
    return "\n".join(blocks)


def render_vtt(segments: tuple[TranscriptSegment, ...], text: str = "") -> str:
    """WebVTT: the ``WEBVTT`` header, then ``HH:MM:SS.mmm --> HH:MM:SS.mmm`` cues."""
    blocks = [
        f"{_clock(cue.start, '.')} --> {_clock(cue.end, '.')}\n{cue.text.strip()}\n"
        for cue in _cues(segments, text)
    ]
    return "WEBVTT\n\n" + "\n".join(blocks)
