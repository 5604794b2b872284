"""Synthesized PCM in the format a client asked for.

WAV and raw PCM are framed in :mod:`skulk_core.audio`; MP3 (LAME), FLAC and Ogg Opus
are encoded with PyAV (FFmpeg's libraries, LGPL builds shipped in the ``av`` wheel).
Opus runs at 48 kHz, so its input is resampled; the others keep the voice's rate.
"""

from __future__ import annotations

import io
from typing import Final

from skulk_core.audio.formats import SpeechFormat
from skulk_core.audio.wav import wav_bytes

# (container, codec, output sample rate or None to keep the input's)
# NOTE: PyAV and numpy load where audio is encoded, not when the daemon starts: together
# they were about a sixth of its import time (issue 43).

_CODECS: Final[dict[SpeechFormat, tuple[str, str, int | None]]] = {
    "mp3": ("mp3", "libmp3lame", None),
    "flac": ("flac", "flac", None),
    "ogg": ("ogg", "libopus", 48_000),
    "opus": ("ogg", "libopus", 48_000),
}


def encode_pcm(pcm: bytes, sample_rate: int, fmt: SpeechFormat) -> bytes:
    """``pcm`` (mono s16le at ``sample_rate``) as a complete ``fmt`` body."""
    match fmt:
        case "pcm":
            return pcm
        case "wav":
            return wav_bytes(pcm, sample_rate)
        case "mp3" | "flac" | "ogg" | "opus":
            container, codec, rate = _CODECS[fmt]
            return _encode(pcm, sample_rate, container, codec, rate or sample_rate)


def _encode(pcm: bytes, sample_rate: int, container: str, codec: str, rate: int) -> bytes:
    import av  # noqa: PLC0415 (see the note above)
    import numpy as np  # noqa: PLC0415

    out = io.BytesIO()
    samples = np.frombuffer(pcm, dtype="<i2").reshape(1, -1)
    with av.open(out, mode="w", format=container) as muxer:
        stream = muxer.add_stream(codec, rate=rate, layout="mono")
        if not isinstance(stream, av.AudioStream):
            raise ValueError(f"{codec} is not an audio codec")
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = sample_rate
        resampler = av.AudioResampler(format=stream.codec_context.format, layout="mono", rate=rate)
        for resampled in [*resampler.resample(frame), *resampler.resample(None)]:
            for packet in stream.encode(resampled):
                muxer.mux(packet)
        for packet in stream.encode(None):
            muxer.mux(packet)
    return out.getvalue()


class StreamEncoder:
    """MP3 (or raw PCM) encoded piece by piece, for a chunked response: each
    :meth:`feed` returns the bytes ready so far, :meth:`close` the rest."""

    def __init__(self, fmt: SpeechFormat, sample_rate: int) -> None:
        if fmt not in ("mp3", "pcm"):
            raise ValueError(f"{fmt} cannot be streamed; mp3 and pcm can")
        self._raw = fmt == "pcm"
        self._sample_rate = sample_rate
        self._out = io.BytesIO()
        self._sent = 0
        if self._raw:
            return
        import av  # noqa: PLC0415 (see the note above)

        # NOTE: no Xing/LAME header: it is rewritten at the start of the file when the
        # muxer closes, and that start has already been sent.
        self._muxer = av.open(
            self._out, mode="w", format="mp3", options={"write_xing": "0", "id3v2_version": "0"}
        )
        stream = self._muxer.add_stream("libmp3lame", rate=sample_rate, layout="mono")
        if not isinstance(stream, av.AudioStream):
            raise ValueError("libmp3lame is not an audio codec")
        self._stream = stream
        self._resampler = av.AudioResampler(
            format=stream.codec_context.format, layout="mono", rate=sample_rate
        )

    def feed(self, pcm: bytes) -> bytes:
        if self._raw:
            return pcm
        import av  # noqa: PLC0415 (see the note above)
        import numpy as np  # noqa: PLC0415

        samples = np.frombuffer(pcm, dtype="<i2").reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = self._sample_rate
        for resampled in self._resampler.resample(frame):
            for packet in self._stream.encode(resampled):
                self._muxer.mux(packet)
        return self._take()

    def close(self) -> bytes:
        if self._raw:
            return b""
        for resampled in self._resampler.resample(None):
            for packet in self._stream.encode(resampled):
                self._muxer.mux(packet)
        for packet in self._stream.encode(None):
            self._muxer.mux(packet)
        self._muxer.close()
        return self._take()

    def _take(self) -> bytes:
        data = self._out.getvalue()[self._sent :]
        self._sent += len(data)
        return data
