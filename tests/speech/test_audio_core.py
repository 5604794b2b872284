"""The pure audio pieces: WAV framing, subtitle rendering, format tables."""

from __future__ import annotations

import io
import wave

import pytest

from skulk_core.audio.formats import (
    SPEECH_FORMATS,
    SPEECH_MEDIA_TYPES,
    TRANSCRIPT_FORMATS,
    TRANSCRIPT_MEDIA_TYPES,
    pcm_headers,
    pcm_seconds,
)
from skulk_core.audio.subtitles import TranscriptSegment, render_srt, render_vtt
from skulk_core.audio.wav import WAV_HEADER_BYTES, wav_bytes

SEGMENTS = (
    TranscriptSegment(id=0, start=0.0, end=1.5, text=" Hello there."),
    TranscriptSegment(id=1, start=3599.9994, end=3723.25, text="An hour later."),
)


def test_wav_bytes_is_a_wav_file_python_reads() -> None:
    pcm = bytes(range(200))
    body = wav_bytes(pcm, 22_050)
    assert len(body) == WAV_HEADER_BYTES + len(pcm) == 244
    with wave.open(io.BytesIO(body)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 22_050)
        assert wav.readframes(wav.getnframes()) == pcm


def test_wav_bytes_refuses_half_frames_and_bad_rates() -> None:
    with pytest.raises(ValueError, match="16-bit frames"):
        wav_bytes(b"\x00", 16_000)
    with pytest.raises(ValueError, match="positive"):
        wav_bytes(b"", 0)


def test_srt_numbers_cues_from_one_with_comma_milliseconds() -> None:
    assert render_srt(SEGMENTS) == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n"
        "\n"
        "2\n00:59:59,999 --> 01:02:03,250\nAn hour later.\n"
    )


def test_vtt_has_its_header_and_dot_milliseconds() -> None:
    assert render_vtt(SEGMENTS) == (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:01.500\nHello there.\n"
        "\n"
        "00:59:59.999 --> 01:02:03.250\nAn hour later.\n"
    )


def test_no_segments_gives_one_zero_length_cue() -> None:
    assert render_srt((), "just text") == "1\n00:00:00,000 --> 00:00:00,000\njust text\n"
    assert render_vtt((), "just text").endswith("00:00:00.000 --> 00:00:00.000\njust text\n")


def test_every_format_has_the_spec_media_type() -> None:
    assert set(SPEECH_MEDIA_TYPES) == set(SPEECH_FORMATS)
    assert SPEECH_MEDIA_TYPES["mp3"] == "audio/mpeg" and SPEECH_MEDIA_TYPES["pcm"] == "audio/pcm"
    assert set(TRANSCRIPT_MEDIA_TYPES) == set(TRANSCRIPT_FORMATS)
    assert TRANSCRIPT_MEDIA_TYPES["srt"] == "application/x-subrip"
    assert TRANSCRIPT_MEDIA_TYPES["vtt"] == "text/vtt"
    assert pcm_headers(24_000) == {
        "X-Audio-Sample-Rate": "24000",
        "X-Audio-Channels": "1",
        "X-Audio-Sample-Format": "s16le",
    }
    assert pcm_seconds(48_000, 24_000) == 1.0
