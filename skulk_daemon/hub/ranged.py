"""A forward-only reader over HTTP ranges: the GGUF header without the weights.

``read_gguf_header`` reads a stream front to back and stops after the metadata. This
reader feeds it from ranged requests, in blocks that double from 256 KiB up to
8 MiB, so a header costs a handful of requests and only its own bytes (plus at most
one block of look-ahead), never the multi-gigabyte tensor data behind it.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Final

FIRST_BLOCK: Final = 256 * 1024
MAX_BLOCK: Final = 8 * 1024 * 1024


class RangedReader(io.RawIOBase):
    def __init__(self, fetch: Callable[[int, int], bytes], *, size: int) -> None:
        super().__init__()
        self._fetch = fetch
        self._size = size
        self._buffer = b""
        self._buffer_start = 0
        self._position = 0
        self._block = FIRST_BLOCK
        self.fetched = 0
        """Body bytes requested so far."""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._position
        size = min(size, self._size - self._position)
        out = bytearray()
        while len(out) < size:
            offset = self._position - self._buffer_start
            if 0 <= offset < len(self._buffer):
                take = self._buffer[offset : offset + size - len(out)]
                out += take
                self._position += len(take)
                continue
            self._fill(size - len(out))
        return bytes(out)

    def _fill(self, wanted: int) -> None:
        start = self._position
        length = min(max(wanted, self._block), self._size - start)
        data = self._fetch(start, start + length - 1)
        if not data:
            raise OSError("the server sent no bytes for a range inside the file")
        self.fetched += len(data)
        self._buffer, self._buffer_start = data, start
        self._block = min(self._block * 2, MAX_BLOCK)
