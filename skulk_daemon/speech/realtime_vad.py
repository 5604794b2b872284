"""Server VAD at the realtime edge: 24 kHz input cut into 20 ms slices, each classified.

:class:`ServerVadGate` takes the socket's decoded PCM16 in appends of any size, cuts
it into 20 ms source-rate slices (960 bytes at 24 kHz), resamples each to the
classifier's 16 kHz frame (exactly 320 samples a slice, so slice *n* is frame *n*),
asks WebRTC VAD whether it is speech and feeds the answer to the pure
:class:`~skulk_core.audio.realtime_turns.TurnDetector`. It remembers the slices of the
last prefix-padding-plus-minimum-speech window so a started turn can send its
preroll, and nothing older. Audio is never kept past that window. :class:`HeldSlices`
gathers one append's slices for the open turn into one forwarded frame.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from skulk_core.audio.realtime_events import INPUT_SAMPLE_RATE
from skulk_core.audio.realtime_turns import FRAME_MS, ServerVad, TurnDetector, TurnEvent
from skulk_daemon.providers.vad_detector import VadSettings, WebRtcClassifier
from skulk_daemon.speech.realtime_wire import Turn

CLASSIFIER_RATE: Final = 16_000
SLICE_BYTES: Final = INPUT_SAMPLE_RATE * FRAME_MS // 1000 * 2
FRAME_BYTES: Final = CLASSIFIER_RATE * FRAME_MS // 1000 * 2


@dataclass(frozen=True, slots=True)
class Slice:
    index: int
    pcm: bytes
    event: TurnEvent | None

    @property
    def start_ms(self) -> int:
        return self.index * FRAME_MS


class ServerVadGate:
    """One session's server VAD."""

    def __init__(self, settings: ServerVad) -> None:
        self.settings = settings
        self._detector = TurnDetector(settings)
        self._classifier = WebRtcClassifier(
            VadSettings(
                sample_rate=CLASSIFIER_RATE,
                aggressiveness=settings.aggressiveness,
                frame_ms=FRAME_MS,
            )
        )
        # NOTE: numpy (the resampler's) loads with the first session, not at daemon
        # start (issue 43).
        from skulk_core.audio.realtime_resample import Resampler  # noqa: PLC0415

        self._resampler = Resampler(INPUT_SAMPLE_RATE, CLASSIFIER_RATE)
        self._frames = bytearray()
        self._remainder = bytearray()
        window = settings.prefix_padding_ms + settings.minimum_speech_ms
        self._ring: deque[Slice] = deque(maxlen=window // FRAME_MS + 2)
        self._index = 0

    def slices(self, pcm: bytes) -> Iterator[Slice]:
        """The whole slices ``pcm`` completes, each with the boundary it completes."""
        self._remainder += pcm
        while len(self._remainder) >= SLICE_BYTES:
            piece = bytes(self._remainder[:SLICE_BYTES])
            del self._remainder[:SLICE_BYTES]
            index = self._index
            self._index += 1
            self._frames += self._resampler.feed_pcm16(piece)
            event: TurnEvent | None = None
            while len(self._frames) >= FRAME_BYTES:
                frame = bytes(self._frames[:FRAME_BYTES])
                del self._frames[:FRAME_BYTES]
                event = self._detector.push(self._classifier.is_speech(frame)) or event
            yield Slice(index, piece, event)

    def remember(self, piece: Slice) -> None:
        """Keep an idle slice for a later turn's preroll."""
        self._ring.append(piece)

    def preroll(self, start_ms: int) -> list[bytes]:
        """The remembered audio from ``start_ms`` on (the started turn's first audio)."""
        return [piece.pcm for piece in self._ring if piece.start_ms >= start_ms]

    def reset(self) -> None:
        """A turn ended: forget its state and the remembered audio; time runs on."""
        self._detector.reset()
        self._ring.clear()


HELD_FLUSH_BYTES: Final = 256 * 1024


@dataclass(slots=True)
class HeldSlices:
    """VAD slices of one append, held for ``turn`` until they go out as one frame.

    VAD classifies 20 ms slices, but a remote provider's input window is counted in
    frames: 20 ms frames would overrun it five times sooner than the client's own.
    """

    turn: Turn | None = None
    pcm: bytearray = field(default_factory=bytearray)

    async def flush(
        self, forward: Callable[[Turn, bytes], Awaitable[None]], then: Turn | None
    ) -> None:
        if self.turn is not None and self.pcm:
            await forward(self.turn, bytes(self.pcm))
        self.pcm.clear()
        self.turn = then
