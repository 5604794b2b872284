"""Voice activity detection over PCM16 that arrives in pieces of any size.

The frame logic behind the built-in ``vad@1.0.0`` provider, with no I/O: a
:class:`VadDetector` is fed mono PCM16 (little-endian) bytes, cuts them into classifier
frames of 10, 20 or 30 ms, buffers the partial frame exactly until the rest arrives, asks
WebRTC VAD whether each frame is speech, and turns those decisions into
:class:`SpeechStarted` / :class:`SpeechStopped` events whose boundaries sit on frame
boundaries. How the input was split never changes the events.

The endpointing rules, all counted in whole classifier frames:

- **minimum speech**: a run of speech starts an utterance only once it has lasted
  ``min_speech_ms`` (rounded up to frames, at least one); shorter blips are ignored.
- **silence hangover**: an utterance stops once ``hangover_ms`` of silence (rounded up,
  at least one frame) has followed it; shorter pauses are bridged. The reported end is
  where the silence began, not where the hangover ran out.
- **preroll**: the reported start is moved ``preroll_ms`` (rounded up) before the first
  speech frame, never before the start of input or the previous utterance's end.
- **maximum utterance**: an utterance that reaches ``max_utterance_ms`` (rounded down)
  from its reported start is stopped there; speech that continues must meet the minimum
  again to start the next one.

WebRTC VAD appends its own hangover to every speech run (a few frames, more after a
long run; the constants are in WebRTC's ``vad_core.c``). The detector knows those
lengths and removes them, so the reported end is where the classifier stopped hearing
speech and ``hangover_ms`` is the only hangover a caller gets. A run that resumes inside
WebRTC's hangover is indistinguishable from one long run; the end of such a run can be
reported early by at most the difference of WebRTC's two hangover lengths, and blips
chained that closely count as one run toward the minimum speech. The price is latency:
with a minimum above one frame, a start is known only once the run has outlasted the
hangover WebRTC would have added to a blip (``decided_sample`` says when).

Nothing outlives the detector: it keeps at most one partial frame of audio and never the
audio it has classified.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol

import webrtcvad  # type: ignore[import-untyped]  # webrtcvad-wheels ships no stubs

SAMPLE_RATES: Final = (8000, 16000, 32000, 48000)
FRAME_MS_CHOICES: Final = (10, 20, 30)
AGGRESSIVENESS_RANGE: Final = (0, 3)
MIN_SPEECH_MS_RANGE: Final = (0, 2000)
HANGOVER_MS_RANGE: Final = (0, 5000)
PREROLL_MS_RANGE: Final = (0, 1000)
MAX_UTTERANCE_MS_RANGE: Final = (5000, 600_000)
"""The lower bound keeps the longest preroll plus the longest confirmed minimum speech
well inside one utterance, so a maximum can never cut an utterance before it starts."""

BYTES_PER_SAMPLE: Final = 2


class VadSettingsError(ValueError):
    """Settings outside the bounds above; the message names the field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VadSettings:
    """One call's detector settings. Construct through :meth:`from_payload` (which
    checks every bound) or directly (``__post_init__`` checks them too)."""

    sample_rate: int
    aggressiveness: int = 2
    frame_ms: int = 30
    min_speech_ms: int = 90
    hangover_ms: int = 300
    preroll_ms: int = 0
    max_utterance_ms: int = 30_000

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise VadSettingsError(f"{name} must be an integer")
        if self.sample_rate not in SAMPLE_RATES:
            raise VadSettingsError(f"sample_rate must be one of {list(SAMPLE_RATES)}")
        if self.frame_ms not in FRAME_MS_CHOICES:
            raise VadSettingsError(f"frame_ms must be one of {list(FRAME_MS_CHOICES)}")
        for name, (low, high) in _RANGES.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise VadSettingsError(f"{name} must be between {low} and {high}")

    @classmethod
    def from_payload(cls, payload: Mapping[str, object]) -> VadSettings:
        """Settings from a JSON object; unknown keys and a missing sample_rate are
        refused like out-of-range values."""
        unknown = sorted(set(payload) - set(_INT_FIELDS))
        if unknown:
            raise VadSettingsError(f"unknown setting {unknown[0]!r}")
        if "sample_rate" not in payload:
            raise VadSettingsError("sample_rate is required")
        values: dict[str, int] = {}
        for name, value in payload.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise VadSettingsError(f"{name} must be an integer")
            values[name] = value
        return cls(**values)

    @property
    def frame_samples(self) -> int:
        return self.sample_rate * self.frame_ms // 1000

    @property
    def frame_bytes(self) -> int:
        return self.frame_samples * BYTES_PER_SAMPLE

    def to_ms(self, samples: int) -> int:
        """Milliseconds at a sample offset; exact at every frame boundary (each
        supported rate is a whole number of samples per millisecond)."""
        return samples * 1000 // self.sample_rate


_INT_FIELDS: Final = (
    "sample_rate",
    "aggressiveness",
    "frame_ms",
    "min_speech_ms",
    "hangover_ms",
    "preroll_ms",
    "max_utterance_ms",
)
_RANGES: Final = {
    "aggressiveness": AGGRESSIVENESS_RANGE,
    "min_speech_ms": MIN_SPEECH_MS_RANGE,
    "hangover_ms": HANGOVER_MS_RANGE,
    "preroll_ms": PREROLL_MS_RANGE,
    "max_utterance_ms": MAX_UTTERANCE_MS_RANGE,
}

StopReason = Literal["silence", "max_utterance", "end_of_input"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechStarted:
    """An utterance began. Offsets are samples from the start of input:
    ``start_sample`` includes the preroll, ``onset_sample`` is the first speech frame,
    ``decided_sample`` is how much input had been classified when this was known."""

    utterance: int
    start_sample: int
    onset_sample: int
    decided_sample: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechStopped:
    """An utterance ended at ``end_sample`` (exclusive), for ``reason``."""

    utterance: int
    start_sample: int
    end_sample: int
    decided_sample: int
    reason: StopReason


VadEvent = SpeechStarted | SpeechStopped


class FrameClassifier(Protocol):
    """Says whether one frame is speech. ``overhang`` is the classifier's own trailing
    hangover in frames (after a short run, after a long run): the detector removes it
    from the end of every run. A classifier without one reports ``(0, 0)``."""

    overhang: tuple[int, int]

    def is_speech(self, frame: bytes) -> bool: ...


# WebRTC's over_hang_max_1 / over_hang_max_2 per mode, for 10/20/30 ms frames
# (kOverHangMax1Q/2Q, ...LBR, ...AGG, ...VAG in vad_core.c).
_WEBRTC_OVERHANG: Final = {
    0: ((8, 14), (4, 7), (3, 5)),
    1: ((8, 14), (4, 7), (3, 5)),
    2: ((6, 9), (3, 5), (2, 3)),
    3: ((6, 9), (3, 5), (2, 3)),
}
# WebRTC switches to the long hangover once a run exceeds this many frames
# (kMaxSpeechFrames).
_WEBRTC_LONG_RUN: Final = 6


class WebRtcClassifier:
    """``webrtcvad.Vad`` (package webrtcvad-wheels, untyped) behind a typed face."""

    def __init__(self, settings: VadSettings) -> None:
        self._vad = webrtcvad.Vad(settings.aggressiveness)
        self._rate = settings.sample_rate
        self.overhang: tuple[int, int] = _WEBRTC_OVERHANG[settings.aggressiveness][
            FRAME_MS_CHOICES.index(settings.frame_ms)
        ]

    def is_speech(self, frame: bytes) -> bool:
        return bool(self._vad.is_speech(frame, self._rate))


@dataclass(slots=True)
class _Utterance:
    index: int
    start: int  # frame index, preroll included
    silence_start: int | None = None  # first silent frame of a pause in progress


class _Endpointer:
    """The rules of the module docstring over per-frame decisions, in frame indices."""

    def __init__(self, settings: VadSettings, overhang: tuple[int, int]) -> None:
        frame = settings.frame_ms
        self._frame_samples = settings.frame_samples
        self._min_speech = max(1, -(-settings.min_speech_ms // frame))
        self._hangover = max(1, -(-settings.hangover_ms // frame))
        self._preroll = -(-settings.preroll_ms // frame)
        self._max_frames = settings.max_utterance_ms // frame
        self._short_overhang, self._long_overhang = overhang
        self.frames = 0
        self._next_index = 0
        self._last_end = 0
        self._active: _Utterance | None = None
        # The observed run of speech frames in progress (None in silence), and the
        # run counted toward the minimum (restarted after a forced stop).
        self._run_start: int | None = None
        self._count_start: int | None = None
        self._count_fresh = True

    def _overhang_after(self, run_frames: int) -> int:
        return self._long_overhang if run_frames > _WEBRTC_LONG_RUN else self._short_overhang

    def _frames_to_confirm(self) -> int:
        # NOTE: only the first frame of a run that follows silence is certainly the
        # classifier's own decision; later ones may be its hangover. A run proves
        # min_speech real frames once it outlasts the hangover those frames would
        # have earned. After a forced stop the run is mid-hangover, so assume the
        # long one.
        if not self._count_fresh:
            return self._min_speech + self._long_overhang
        if self._min_speech == 1:
            return 1
        return self._min_speech + self._overhang_after(self._min_speech)

    def push(self, speech: bool) -> list[VadEvent]:
        t = self.frames
        self.frames += 1
        events: list[VadEvent] = []
        if speech:
            if self._run_start is None:
                self._run_start = t
            if self._count_start is None:
                self._count_start = t
        active = self._active
        if active is None:
            if not speech:
                self._reset_run()
            elif t + 1 - self._counted() >= self._frames_to_confirm():
                events.append(self._start(t))
        elif speech:
            active.silence_start = None
        else:
            if active.silence_start is None:
                run = t - self._observed_run()
                inferred = t - min(self._overhang_after_run(run), run - 1)
                active.silence_start = max(inferred, active.start + 1)
                self._reset_run()
            if t + 1 - active.silence_start >= self._hangover:
                events.append(self._stop(active.silence_start, "silence"))
        active = self._active
        if active is not None and self.frames - active.start >= self._max_frames:
            end = active.silence_start if active.silence_start is not None else self.frames
            events.append(self._stop(end, "max_utterance"))
            if speech:
                self._count_start = None
                self._count_fresh = False
        return events

    def finish(self) -> list[VadEvent]:
        active = self._active
        if active is None:
            return []
        end = active.silence_start if active.silence_start is not None else self.frames
        return [self._stop(end, "end_of_input")]

    def _overhang_after_run(self, observed: int) -> int:
        # A run longer than WebRTC's threshold earns the long hangover, so an observed
        # run only that long or longer can hide one.
        if observed >= _WEBRTC_LONG_RUN + 1 + self._long_overhang:
            return self._long_overhang
        return self._short_overhang

    def _observed_run(self) -> int:
        assert self._run_start is not None, "a pause always follows a run of speech"
        return self._run_start

    def _counted(self) -> int:
        assert self._count_start is not None
        return self._count_start

    def _reset_run(self) -> None:
        self._run_start = None
        self._count_start = None
        self._count_fresh = True

    def _start(self, t: int) -> SpeechStarted:
        onset = self._counted()
        start = max(onset - self._preroll, self._last_end)
        self._active = _Utterance(index=self._next_index, start=start)
        self._next_index += 1
        return SpeechStarted(
            utterance=self._active.index,
            start_sample=start * self._frame_samples,
            onset_sample=onset * self._frame_samples,
            decided_sample=(t + 1) * self._frame_samples,
        )

    def _stop(self, end: int, reason: StopReason) -> SpeechStopped:
        active = self._active
        assert active is not None
        self._active = None
        self._last_end = end
        return SpeechStopped(
            utterance=active.index,
            start_sample=active.start * self._frame_samples,
            end_sample=end * self._frame_samples,
            decided_sample=self.frames * self._frame_samples,
            reason=reason,
        )


class VadDetector:
    """Feed PCM16 bytes in pieces of any size (even split mid-sample); get events.

    ``finish`` reports an utterance still open as stopped at the end of the last whole
    frame; the trailing partial frame is never classified. After ``finish`` (or
    ``close``) the detector holds no audio and refuses more input.
    """

    def __init__(self, settings: VadSettings, classifier: FrameClassifier | None = None) -> None:
        self.settings = settings
        self._classifier: FrameClassifier = (
            classifier if classifier is not None else WebRtcClassifier(settings)
        )
        self._endpointer = _Endpointer(settings, self._classifier.overhang)
        self._pending = bytearray()
        self._received = 0
        self._closed = False

    @property
    def bytes_received(self) -> int:
        return self._received

    @property
    def samples_classified(self) -> int:
        return self._endpointer.frames * self.settings.frame_samples

    @property
    def pending_bytes(self) -> int:
        """Bytes waiting for the rest of their frame (always under one frame)."""
        return len(self._pending)

    def feed(self, pcm: bytes | bytearray | memoryview) -> list[VadEvent]:
        if self._closed:
            raise RuntimeError("the detector has finished")
        self._received += len(pcm)
        self._pending += pcm
        size = self.settings.frame_bytes
        whole = len(self._pending) - len(self._pending) % size
        events: list[VadEvent] = []
        view = memoryview(self._pending)
        try:
            for offset in range(0, whole, size):
                frame = bytes(view[offset : offset + size])
                events += self._endpointer.push(self._classifier.is_speech(frame))
        finally:
            view.release()
        del self._pending[:whole]
        return events

    def finish(self) -> list[VadEvent]:
        """End of input: close any open utterance and drop the partial frame."""
        if self._closed:
            return []
        events = self._endpointer.finish()
        self.close()
        return events

    def close(self) -> None:
        self._closed = True
        self._pending = bytearray()
