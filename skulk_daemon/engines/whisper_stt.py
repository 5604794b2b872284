"""Speech to text with faster-whisper (CTranslate2) on the CPU, int8.

The upload's bytes are decoded in memory by :mod:`.audio_decode` (PyAV, which reads
WAV, MP3, FLAC, OGG/Opus, WebM and MP4/M4A; bounded in decoded duration while it
decodes), resampled to 16 kHz mono and transcribed greedily. Segments come from a
generator: cancellation takes effect between segments. ``translate`` asks Whisper's own
translate task (English out).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt
from faster_whisper import WhisperModel  # type: ignore[import-untyped]

from skulk_core.audio.subtitles import TranscriptSegment
from skulk_daemon.engines.audio_decode import AudioTooLong, AudioUndecodable, decode_bounded
from skulk_daemon.engines.base import EngineLoadError

if TYPE_CHECKING:
    from skulk_daemon.engines.whisper_streaming import WhisperStreamingSession

log = logging.getLogger(__name__)

SAMPLE_RATE: Final = 16_000
COMPUTE_TYPE: Final = "int8"
WARM_UP_SECONDS: Final = 1.0


class TranscriptionCancelled(Exception):
    """The caller cancelled between segments."""


class TranscriptionRefused(ValueError):
    """Audio this model cannot transcribe; the message is safe to show a user."""


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    language: str
    duration: float
    segments: tuple[TranscriptSegment, ...]


class WhisperTranscriber:
    """One loaded Whisper model. Not thread-safe: one caller at a time."""

    def __init__(self, model: WhisperModel) -> None:
        self._model = model

    @classmethod
    def open(cls, model_dir: Path, n_threads: int | None = None) -> WhisperTranscriber:
        if not (model_dir / "model.bin").is_file():
            raise EngineLoadError(f"{model_dir} holds no CTranslate2 model.bin")
        try:
            model = WhisperModel(
                str(model_dir),
                device="cpu",
                compute_type=COMPUTE_TYPE,
                cpu_threads=n_threads or (os.cpu_count() or 1),
                local_files_only=True,
            )
        except (RuntimeError, ValueError, OSError) as exc:
            raise EngineLoadError(f"faster-whisper cannot load {model_dir.name}: {exc}") from None
        return cls(model)

    def warm_up(self) -> None:
        silence = np.zeros(int(SAMPLE_RATE * WARM_UP_SECONDS), dtype=np.float32)
        self.transcribe_samples(silence)

    def create_streaming_session(
        self,
        *,
        delay_ms: int = 480,
        temperature: float = 0.0,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> WhisperStreamingSession:
        """A realtime session over this model (incremental decode, LocalAgreement-2)."""
        from skulk_daemon.engines.whisper_streaming import (  # noqa: PLC0415 (cycle)
            WhisperStreamingSession,
        )

        return WhisperStreamingSession(
            self._model, delay_ms=delay_ms, temperature=temperature, cancelled=cancelled
        )

    def transcribe(
        self,
        audio: bytes,
        *,
        language: str | None = None,
        prompt: str | None = None,
        temperature: float | None = None,
        translate: bool = False,
        cancelled: Callable[[], bool] = lambda: False,
        on_segment: Callable[[TranscriptSegment], None] | None = None,
    ) -> Transcript:
        """The transcript of an encoded audio file's bytes; each segment also goes to
        ``on_segment`` as soon as it is decoded."""
        try:
            samples = decode_bounded(audio, sample_rate=SAMPLE_RATE)
        except (AudioTooLong, AudioUndecodable) as exc:
            raise TranscriptionRefused(str(exc)) from None
        if samples.size == 0:
            raise TranscriptionRefused("the file holds no audio samples")
        return self.transcribe_samples(
            samples,
            language=language,
            prompt=prompt,
            temperature=temperature,
            translate=translate,
            cancelled=cancelled,
            on_segment=on_segment,
        )

    def transcribe_samples(
        self,
        samples: npt.NDArray[np.float32],
        *,
        language: str | None = None,
        prompt: str | None = None,
        temperature: float | None = None,
        translate: bool = False,
        cancelled: Callable[[], bool] = lambda: False,
        on_segment: Callable[[TranscriptSegment], None] | None = None,
    ) -> Transcript:
        segments, info = self._model.transcribe(
            samples,
            language=language,
            task="translate" if translate else "transcribe",
            beam_size=1,
            initial_prompt=prompt,
            temperature=0.0 if temperature is None else temperature,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        found: list[TranscriptSegment] = []
        for segment in segments:
            if cancelled():
                raise TranscriptionCancelled
            decoded = TranscriptSegment(
                id=len(found),
                start=round(float(segment.start), 3),
                end=round(float(segment.end), 3),
                text=segment.text.strip(),
            )
            found.append(decoded)
            if on_segment is not None:
                on_segment(decoded)
        text = " ".join(segment.text for segment in found if segment.text)
        return Transcript(
            text=text,
            language=info.language,
            duration=round(float(info.duration), 3),
            segments=tuple(found),
        )
