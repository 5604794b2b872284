"""A true streaming session over faster-whisper: incremental audio in, confirmed words out.

Audio (16 kHz float32) arrives in pieces. Every ``delay`` of new audio the session
re-decodes its whole window and applies LocalAgreement-2
(:mod:`skulk_core.audio.realtime_agreement`): words two consecutive decodes agree on
are confirmed and returned at once; the rest waits for the next decode. After each
decode the window is trimmed at the end of a completed segment inside the confirmed
text (and, as a last resort, at the confirmed end once it nears Whisper's 30 s
window), so one decode never costs more than a bounded window. Confirmed text outside
the window is the next decode's prompt. :meth:`finish` (input half-closed) decodes the
tail once more and confirms everything left. This is whisper_streaming's (UFAL)
OnlineASRProcessor, not a recording buffered and transcribed at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt
from faster_whisper import WhisperModel  # type: ignore[import-untyped]

from skulk_core.audio.realtime_agreement import LocalAgreement, TimedWord, trim_point

SAMPLE_RATE: Final = 16_000
TRIM_AFTER_S: Final = 10.0
"""A window longer than this is trimmed at a completed segment within the confirmed text."""
FORCE_TRIM_S: Final = 25.0
"""A window this long (no completed segment to cut at) is cut at the confirmed end."""
PROMPT_CHARS: Final = 200


class StreamingCancelled(Exception):
    """The caller cancelled between decodes."""


class WhisperStreamingSession:
    """One utterance's streaming decode. Not thread-safe: one feeder at a time."""

    def __init__(
        self,
        model: WhisperModel,
        *,
        delay_ms: int = 480,
        temperature: float = 0.0,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        self._model = model
        self._delay = SAMPLE_RATE * delay_ms // 1000
        self._temperature = temperature
        self._cancelled = cancelled
        self._window = np.zeros(0, dtype=np.float32)
        self._offset = 0.0  # seconds of audio trimmed off the window's front
        self._pending = 0  # samples appended since the last decode
        self._agreement = LocalAgreement()
        self._confirmed: list[TimedWord] = []
        self._outside: list[TimedWord] = []  # confirmed words no longer in the window
        self.decodes = 0
        self.received = 0
        self.language = "en"

    @property
    def duration(self) -> float:
        return self.received / SAMPLE_RATE

    def push(self, samples: npt.NDArray[np.float32]) -> list[TimedWord]:
        """Append audio; when ``delay`` of new audio has gathered, decode and return the
        newly confirmed words (else none)."""
        if samples.size:
            self._window = np.concatenate([self._window, samples])
            self._pending += samples.size
            self.received += samples.size
        if self._pending < self._delay:
            return []
        return self._step()

    def finish(self) -> list[TimedWord]:
        """End of input: decode what has not been decoded, then confirm every word left."""
        words = self._step() if self._pending else []
        tail = self._agreement.unconfirmed()
        self._confirmed.extend(tail)
        return words + tail

    def _step(self) -> list[TimedWord]:
        if self._cancelled():
            raise StreamingCancelled
        self._pending = 0
        words, segment_ends = self._decode()
        self._agreement.insert(words)
        confirmed = self._agreement.flush()
        self._confirmed.extend(confirmed)
        self._trim(segment_ends)
        return confirmed

    def _decode(self) -> tuple[list[TimedWord], list[float]]:
        self.decodes += 1
        prompt = "".join(w.text for w in self._outside)[-PROMPT_CHARS:].strip() or None
        segments, info = self._model.transcribe(
            self._window,
            beam_size=1,
            temperature=self._temperature,
            initial_prompt=prompt,
            condition_on_previous_text=False,
            word_timestamps=True,
            vad_filter=False,
        )
        self.language = str(info.language)
        words: list[TimedWord] = []
        ends: list[float] = []
        for segment in segments:
            if self._cancelled():
                raise StreamingCancelled
            ends.append(self._offset + float(segment.end))
            for word in segment.words or ():
                words.append(
                    TimedWord(
                        start=self._offset + float(word.start),
                        end=self._offset + float(word.end),
                        text=str(word.word),
                    )
                )
        return words, ends

    def _trim(self, segment_ends: list[float]) -> None:
        length = self._window.size / SAMPLE_RATE
        confirmed_end = self._agreement.last_confirmed_end
        cut: float | None = None
        if length > TRIM_AFTER_S:
            cut = trim_point(segment_ends, confirmed_end)
        if cut is None and length > FORCE_TRIM_S and confirmed_end > self._offset:
            cut = confirmed_end
        if cut is None or cut <= self._offset:
            return
        drop = int((cut - self._offset) * SAMPLE_RATE)
        self._window = self._window[drop:]
        self._offset = cut
        self._agreement.forget_before(cut)
        self._outside = [w for w in self._confirmed if w.end <= cut]
