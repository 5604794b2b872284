"""HTTP byte ranges for the store's internal transport, decided without I/O.

The transport serves one ``Range: bytes=start-end`` (or ``start-``, or ``-suffix``)
per request, the form a resuming download sends. A header that is not that form is
a 400; a range that does not overlap the file is a 416 (the client's partial is
longer than the file, or it asked past the end).
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

_SINGLE: Final = re.compile(r"bytes=(\d*)-(\d*)")
MAX_RANGE_HEADER_CHARS: Final = 64


class ByteRange(msgspec.Struct, frozen=True, kw_only=True):
    start: int
    end: int
    """Inclusive, as in ``Content-Range``."""

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end}/{size}"


class RangeRefused(msgspec.Struct, frozen=True, kw_only=True):
    status: int
    """400 (malformed) or 416 (not satisfiable)."""
    message: str


def parse_range(header: str | None, size: int) -> ByteRange | RangeRefused | None:
    """The range ``header`` asks of a ``size``-byte file; None: the whole file."""
    if header is None:
        return None
    text = header.strip()
    if len(text) > MAX_RANGE_HEADER_CHARS:
        return RangeRefused(status=400, message="the Range header is too long")
    match = _SINGLE.fullmatch(text)
    if match is None:
        return RangeRefused(
            status=400,
            message=f"unsupported Range {text!r}: send one range, bytes=start-end",
        )
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return RangeRefused(status=400, message="the Range names no bytes")
    if not first:
        suffix = int(last)
        if suffix == 0 or size == 0:
            return RangeRefused(status=416, message=f"the file has {size} bytes")
        return ByteRange(start=max(size - suffix, 0), end=size - 1)
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return RangeRefused(status=400, message=f"the Range ends before it starts: {text!r}")
    if start >= size:
        return RangeRefused(
            status=416, message=f"the Range starts at byte {start}; the file has {size} bytes"
        )
    return ByteRange(start=start, end=min(end, size - 1))
