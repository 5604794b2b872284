"""LocalAgreement-2: which words of a growing re-decoded window are final.

A streaming Whisper session re-decodes its audio window every time enough new audio
has arrived. Each decode is a *hypothesis* of timed words. A word is *confirmed* (sent
to the client, never retracted) once two consecutive hypotheses agree on it: the
longest common prefix of the previous and the new hypothesis, past what is already
confirmed, is committed. This is the policy of whisper_streaming (Macháček et al.,
UFAL, "Turning Whisper into Real-Time Transcription System", 2023).

Times are seconds from the start of the session's audio. The window is trimmed at
the end of a completed segment lying within the confirmed text (see
:func:`trim_point`), so the cost of one decode stays bounded however long the
utterance is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

OVERLAP_SLACK_S: Final = 0.1
"""A new word starting this little before the last confirmed end is still considered new."""
NGRAM_CHECK_S: Final = 1.0
"""How near the last confirmed end a hypothesis must start for an n-gram overlap check."""
MAX_NGRAM: Final = 5


@dataclass(frozen=True, slots=True)
class TimedWord:
    """One decoded word; ``text`` keeps Whisper's leading space (``" fox"``)."""

    start: float
    end: float
    text: str

    @property
    def key(self) -> str:
        return self.text.strip()


class LocalAgreement:
    """The confirmed/unconfirmed split of one streaming session's words."""

    def __init__(self) -> None:
        self._confirmed_in_window: list[TimedWord] = []
        self._previous: list[TimedWord] = []
        self._new: list[TimedWord] = []
        self.last_confirmed_end = 0.0

    def insert(self, hypothesis: Sequence[TimedWord]) -> None:
        """A new decode of the window (absolute times). Words already confirmed are
        dropped, including a repeated n-gram at the boundary (Whisper re-emits the
        confirmed tail when the window still holds its audio)."""
        fresh = [w for w in hypothesis if w.start > self.last_confirmed_end - OVERLAP_SLACK_S]
        confirmed = self._confirmed_in_window
        if fresh and confirmed and abs(fresh[0].start - self.last_confirmed_end) < NGRAM_CHECK_S:
            for n in range(1, min(len(confirmed), len(fresh), MAX_NGRAM) + 1):
                if [w.key for w in confirmed[-n:]] == [w.key for w in fresh[:n]]:
                    del fresh[:n]
                    break
        self._new = fresh

    def flush(self) -> list[TimedWord]:
        """Confirm the longest common prefix of the previous and the new hypothesis."""
        confirmed: list[TimedWord] = []
        new = self._new
        previous = self._previous
        while new and previous and new[0].key == previous[0].key:
            word = new.pop(0)
            previous.pop(0)
            confirmed.append(word)
            self.last_confirmed_end = word.end
        self._previous = new
        self._new = []
        self._confirmed_in_window.extend(confirmed)
        return confirmed

    def unconfirmed(self) -> list[TimedWord]:
        """The latest hypothesis past the confirmed text (what the end of input commits)."""
        return list(self._previous)

    def forget_before(self, time: float) -> None:
        """The window was trimmed at ``time``: confirmed words before it leave the
        n-gram check."""
        self._confirmed_in_window = [w for w in self._confirmed_in_window if w.end > time]


def trim_point(segment_ends: Sequence[float], last_confirmed_end: float) -> float | None:
    """Where to cut the window after a decode: the end of the latest completed segment
    (never the last segment, which may still grow) at or before the confirmed text's
    end; ``None`` when no such segment exists. ``segment_ends`` are absolute times."""
    if last_confirmed_end <= 0:
        return None
    ends = list(segment_ends)
    if len(ends) < 2:
        return None
    candidates = [end for end in ends[:-1] if end <= last_confirmed_end]
    return candidates[-1] if candidates else None


def joined(words: Sequence[TimedWord], *, first: bool) -> str:
    """The text of confirmed words as one delta: Whisper's spaces kept, the session's
    very first word left-stripped, so deltas concatenate to the transcript."""
    text = "".join(w.text for w in words)
    return text.lstrip() if first else text
