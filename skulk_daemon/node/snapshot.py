"""State snapshots: the event log is bounded by folding it into a snapshot.

Every ``SNAPSHOT_EVERY`` events a node (master or follower) writes its State and
the term of its last event to ``state.snapshot`` (atomically, owner-only), then
empties its event log. Start-up loads the snapshot and replays the log after it.
A follower that is too far behind (or diverged) installs the master's snapshot
the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.ids import NodeId
from skulk_core.state.apply import apply
from skulk_core.state.events import IndexedEvent
from skulk_core.state.state import State
from skulk_host.fsutil import atomic_write


def positive_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


SNAPSHOT_EVERY: Final = positive_env("SKULK_SNAPSHOT_EVERY", 1000)
"""Events between snapshots (``SKULK_SNAPSHOT_EVERY`` overrides it, for tests)."""
SNAPSHOT_FILE: Final = "state.snapshot"


class StoredSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    state: State
    last_term: int
    last_master: NodeId | None = None


class SnapshotCorrupt(RuntimeError):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} cannot be read ({reason}); move it aside to start from the log")


_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(StoredSnapshot)


def save_snapshot(path: Path, state: State, last_term: int, last_master: NodeId | None) -> None:
    snapshot = StoredSnapshot(state=state, last_term=last_term, last_master=last_master)
    atomic_write(path, _encoder.encode(snapshot))


def load_snapshot(path: Path) -> StoredSnapshot | None:
    if not path.exists():
        return None
    try:
        return _decoder.decode(path.read_bytes())
    except (msgspec.DecodeError, OSError) as exc:
        raise SnapshotCorrupt(path, str(exc)) from None


def resume(
    snapshot: StoredSnapshot | None, replayed: Iterable[IndexedEvent]
) -> tuple[State, int, NodeId | None]:
    """The State a node restarts with, and the term and master of its last event: the
    snapshot (if any) with the replayed log's events past it applied."""
    state = snapshot.state if snapshot is not None else State()
    last_term = snapshot.last_term if snapshot is not None else 0
    last_master = snapshot.last_master if snapshot is not None else None
    for event in replayed:
        if event.idx <= state.last_event_applied_idx:
            continue  # already folded into the snapshot
        state = apply(state, event)
        last_term, last_master = event.term, event.indexed_by
    return state, last_term, last_master
