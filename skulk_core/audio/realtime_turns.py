"""Server VAD turns of the realtime edge: per-frame speech decisions in, turn boundaries out.

The realtime WebSocket classifies its input in 20 ms frames (WebRTC VAD at 16 kHz) and
feeds each decision to a :class:`TurnDetector`, which applies the spec's
``turn_detection`` settings, all in whole frames:

- an utterance starts once speech has lasted ``minimum_speech_ms``; the reported start
  is ``prefix_padding_ms`` before the first speech frame (never before the end of the
  previous turn or the start of input);
- it stops once ``silence_duration_ms`` of silence followed speech (reason
  ``silence``; the reported end is where the silence began), or when it has lasted
  ``maximum_utterance_ms`` from its reported start (reason ``max_utterance``).

Times are milliseconds from the start of the session's input. :meth:`reset` starts the
next turn from the current position (the edge resets after each completed turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

FRAME_MS: Final = 20
AGGRESSIVENESS_RANGE: Final = (0, 3)
PREFIX_PADDING_MS_RANGE: Final = (0, 2000)
SILENCE_DURATION_MS_RANGE: Final = (20, 5000)
MINIMUM_SPEECH_MS_RANGE: Final = (20, 5000)
MAXIMUM_UTTERANCE_MS_RANGE: Final = (100, 120_000)


class TurnSettingsError(ValueError):
    """A ``turn_detection`` setting outside its bounds; the message names the field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerVad:
    """``turn_detection: {"type": "server_vad", ...}`` with its defaults."""

    aggressiveness: int = 2
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    minimum_speech_ms: int = 100
    maximum_utterance_ms: int = 30_000

    def __post_init__(self) -> None:
        for name, (low, high) in _RANGES.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TurnSettingsError(f"turn_detection.{name} must be an integer")
            if not low <= value <= high:
                raise TurnSettingsError(
                    f"turn_detection.{name} must be between {low} and {high}, got {value}"
                )

    def to_json(self) -> dict[str, object]:
        return {
            "type": "server_vad",
            "aggressiveness": self.aggressiveness,
            "prefix_padding_ms": self.prefix_padding_ms,
            "silence_duration_ms": self.silence_duration_ms,
            "minimum_speech_ms": self.minimum_speech_ms,
            "maximum_utterance_ms": self.maximum_utterance_ms,
        }


_RANGES: Final = {
    "aggressiveness": AGGRESSIVENESS_RANGE,
    "prefix_padding_ms": PREFIX_PADDING_MS_RANGE,
    "silence_duration_ms": SILENCE_DURATION_MS_RANGE,
    "minimum_speech_ms": MINIMUM_SPEECH_MS_RANGE,
    "maximum_utterance_ms": MAXIMUM_UTTERANCE_MS_RANGE,
}


def _frames(ms: int) -> int:
    return max(1, -(-ms // FRAME_MS))


@dataclass(frozen=True, slots=True)
class TurnStarted:
    start_ms: int
    """The utterance's start, prefix padding included."""


@dataclass(frozen=True, slots=True)
class TurnStopped:
    end_ms: int
    reason: Literal["silence", "max_utterance"]


TurnEvent = TurnStarted | TurnStopped


class TurnDetector:
    """One session's turn state over 20 ms frame decisions."""

    def __init__(self, settings: ServerVad) -> None:
        self._min_speech = _frames(settings.minimum_speech_ms)
        self._silence = _frames(settings.silence_duration_ms)
        self._prefix = -(-settings.prefix_padding_ms // FRAME_MS)
        self._max = max(1, settings.maximum_utterance_ms // FRAME_MS)
        self._frame = 0  # frames seen so far this session
        self._floor = 0  # no start before this frame (previous turn's end)
        self._run = 0  # consecutive speech frames while idle
        self._start: int | None = None  # frame the current utterance started at
        self._silence_start: int | None = None

    @property
    def in_speech(self) -> bool:
        return self._start is not None

    @property
    def position_ms(self) -> int:
        return self._frame * FRAME_MS

    def push(self, speech: bool) -> TurnEvent | None:
        """One frame's decision; the boundary it completes, if any."""
        index = self._frame
        self._frame += 1
        if self._start is None:
            self._run = self._run + 1 if speech else 0
            if self._run < self._min_speech:
                return None
            onset = index - self._run + 1
            self._start = max(self._floor, onset - self._prefix)
            self._silence_start = None
            return TurnStarted(start_ms=self._start * FRAME_MS)
        if speech:
            self._silence_start = None
        elif self._silence_start is None:
            self._silence_start = index
        if self._silence_start is not None and self._frame - self._silence_start >= self._silence:
            return self._stop(self._silence_start, "silence")
        if self._frame - self._start >= self._max:
            return self._stop(self._frame, "max_utterance")
        return None

    def _stop(self, end: int, reason: Literal["silence", "max_utterance"]) -> TurnStopped:
        self._start = None
        self._silence_start = None
        self._run = 0
        self._floor = self._frame
        return TurnStopped(end_ms=end * FRAME_MS, reason=reason)

    def reset(self) -> None:
        """Forget any utterance in progress; the next starts no earlier than now."""
        self._start = None
        self._silence_start = None
        self._run = 0
        self._floor = self._frame
