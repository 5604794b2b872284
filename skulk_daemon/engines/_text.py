"""Streaming detokenization: token bytes in, releasable text out.

Two things make a token's text unsafe to send the moment it is sampled:

* a token can end in the middle of a multi-byte UTF-8 character (byte-fallback
  vocabularies split emoji and CJK into several tokens), so undecodable tail
  bytes wait for the next token;
* it may be the start of a stop string. Text that could still grow into a stop
  string is held back; once a stop string appears, everything before it is
  released and the stop string itself never is.
"""

from __future__ import annotations

import codecs
from typing import Final

_UTF8_DECODER: Final = codecs.getincrementaldecoder("utf-8")


class TextStream:
    """Per-sequence streaming decoder with exact stop-string handling."""

    __slots__ = ("_decoder", "_held", "_stops", "matched")

    def __init__(self, stops: tuple[str, ...] = ()) -> None:
        self._decoder = _UTF8_DECODER(errors="replace")
        # Empty stop strings would match before any text; they mean nothing.
        self._stops = tuple(stop for stop in stops if stop)
        self._held = ""
        self.matched: str | None = None
        """The stop string that ended generation, once one has."""

    def push(self, data: bytes) -> tuple[str, bool]:
        """Add one token's bytes; return the text now safe to emit and whether a
        stop string was reached (generation must then end)."""
        text = self._decoder.decode(data)
        if not self._stops:
            return text, False
        buffer = self._held + text
        # The stop that completes first wins (ties: the longer one), so the
        # result does not depend on how the text was split into tokens.
        best_end = -1
        cut = -1
        for stop in self._stops:
            found = buffer.find(stop)
            if found == -1:
                continue
            end = found + len(stop)
            if best_end == -1 or end < best_end or (end == best_end and found < cut):
                best_end, cut, self.matched = end, found, stop
        if cut != -1:
            self._held = ""
            return buffer[:cut], True
        keep = self._stop_prefix_length(buffer)
        if keep:
            self._held = buffer[-keep:]
            return buffer[:-keep], False
        self._held = ""
        return buffer, False

    def flush(self) -> str:
        """End of generation: release held text (an incomplete UTF-8 tail
        becomes U+FFFD, as any lossy decoder would show it)."""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return text

    def _stop_prefix_length(self, buffer: str) -> int:
        """Length of the longest suffix of ``buffer`` that begins some stop string."""
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop[:size]):
                    longest = size
                    break
        return longest
