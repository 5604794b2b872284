"""The durable event log: append-only, length-prefixed msgpack, fsync'd per append.

File layout: an 8-byte magic, then records of ``u32 length | u32 crc32 | payload``
(big-endian), each payload one msgpack-encoded :class:`IndexedEvent`.

Recovery rules, applied when the log is opened:
- a torn tail (an incomplete header or payload, or a bad checksum on the very last
  record) is what a crash mid-append leaves: the file is cut back to the last whole
  record and the caller is told what was dropped;
- a bad record with whole records after it is real corruption: opening refuses,
  naming the byte offset, and touches nothing.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from skulk_core.state.events import IndexedEvent
from skulk_host.fsutil import fsync_dir

MAGIC = b"SKLKEV1\n"
_HEADER = struct.Struct(">II")
# A single event is small (an instance with its shard table); anything near this is
# a corrupt length field, not a record.
MAX_RECORD_BYTES = 16 * 1024 * 1024

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(IndexedEvent)


class EventLogCorrupt(RuntimeError):
    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(
            f"event log {path} is corrupt at byte offset {offset}: {reason}. "
            "Nothing was changed; move the file aside to start with an empty log."
        )
        self.offset = offset


@dataclass(frozen=True, slots=True)
class TailRecovery:
    """What opening the log cut off a torn tail."""

    offset: int
    dropped_bytes: int
    reason: str

    def describe(self, path: Path) -> str:
        return (
            f"event log {path}: dropped a torn record at byte offset {self.offset} "
            f"({self.dropped_bytes} bytes, {self.reason}); recovered every whole record before it"
        )


@dataclass(frozen=True, slots=True)
class _Scan:
    events: list[IndexedEvent]
    good_end: int
    tail: TailRecovery | None


def _scan(path: Path, data: bytes) -> _Scan:
    if not data.startswith(MAGIC):
        if MAGIC.startswith(data):
            # A crash while writing the magic itself: an empty log.
            return _Scan([], 0, TailRecovery(0, len(data), "incomplete file header"))
        raise EventLogCorrupt(path, 0, "not a Skulk event log (bad magic)")
    events: list[IndexedEvent] = []
    offset = len(MAGIC)
    end = len(data)
    while offset < end:
        if end - offset < _HEADER.size:
            return _Scan(events, offset, TailRecovery(offset, end - offset, "incomplete header"))
        length, checksum = _HEADER.unpack_from(data, offset)
        body_start = offset + _HEADER.size
        body_end = body_start + length
        if length > MAX_RECORD_BYTES:
            if body_end >= end:
                reason = f"implausible record length {length}"
                return _Scan(events, offset, TailRecovery(offset, end - offset, reason))
            raise EventLogCorrupt(path, offset, f"implausible record length {length}")
        if body_end > end:
            return _Scan(events, offset, TailRecovery(offset, end - offset, "incomplete record"))
        body = data[body_start:body_end]
        is_last = body_end == end
        if zlib.crc32(body) != checksum:
            if is_last:
                return _Scan(events, offset, TailRecovery(offset, end - offset, "bad checksum"))
            raise EventLogCorrupt(path, offset, "checksum mismatch")
        try:
            events.append(_decoder.decode(body))
        except msgspec.DecodeError as exc:
            raise EventLogCorrupt(path, offset, f"undecodable record ({exc})") from None
        offset = body_end
    return _Scan(events, offset, None)


class EventLog:
    """An open, append-only event log. Not thread-safe: one writer (the master)."""

    def __init__(self, path: Path, handle: int) -> None:
        self._path = path
        self._fd = handle

    @property
    def path(self) -> Path:
        return self._path

    @classmethod
    def open(cls, path: Path) -> tuple[EventLog, list[IndexedEvent], TailRecovery | None]:
        """Open (creating if absent), replay and, if needed, cut a torn tail."""
        path.parent.mkdir(parents=True, exist_ok=True)
        data = path.read_bytes() if path.exists() else b""
        scan = _scan(path, data) if data else _Scan([], 0, None)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if scan.tail is not None or not data:
                os.ftruncate(fd, scan.good_end)
                if scan.good_end == 0:
                    os.pwrite(fd, MAGIC, 0)
                os.fsync(fd)
                fsync_dir(path.parent)
            os.lseek(fd, 0, os.SEEK_END)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd), scan.events, scan.tail

    def append(self, events: Iterable[IndexedEvent]) -> None:
        """Append and fsync. Returns only once the records are durable."""
        chunks = []
        for event in events:
            body = _encoder.encode(event)
            chunks.append(_HEADER.pack(len(body), zlib.crc32(body)))
            chunks.append(body)
        if not chunks:
            return
        view = memoryview(b"".join(chunks))
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            os.fsync(self._fd)
        except OSError:
            # A full disk mid-write leaves a partial record; cut it off so the next
            # append does not land after garbage (a corrupt middle on replay).
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
                os.lseek(self._fd, 0, os.SEEK_END)
            raise

    def reset(self) -> None:
        """Drop every record (a snapshot now holds them): the log is MAGIC alone."""
        os.ftruncate(self._fd, len(MAGIC))
        os.lseek(self._fd, 0, os.SEEK_END)
        os.fsync(self._fd)

    def size_bytes(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


def read_events(path: Path) -> Iterator[IndexedEvent]:
    """Stream the whole records of a log without holding it in memory (for export).

    Stops quietly at a torn tail: a concurrent append may be half-written.
    """
    if not path.exists():
        return
    with path.open("rb") as handle:
        if handle.read(len(MAGIC)) != MAGIC:
            return
        while True:
            header = handle.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return
            length, checksum = _HEADER.unpack(header)
            if length > MAX_RECORD_BYTES:
                return
            body = handle.read(length)
            if len(body) < length or zlib.crc32(body) != checksum:
                return
            yield _decoder.decode(body)
