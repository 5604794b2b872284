from datetime import UTC, datetime
from pathlib import Path

import pytest

from skulk_core.ids import NodeId
from skulk_core.state.events import IndexedEvent, NodeJoined
from skulk_daemon.node.eventlog import MAGIC, EventLog, EventLogCorrupt, read_events

NODE = NodeId("12D3KooWnode")


def _event(idx: int) -> IndexedEvent:
    return IndexedEvent(
        idx=idx,
        event=NodeJoined(node_id=NodeId(f"12D3KooW{idx}")),
        origin=NODE,
        recorded_at=datetime(2026, 11, 30, tzinfo=UTC),
    )


def _write(path: Path, count: int) -> None:
    log, replayed, torn = EventLog.open(path)
    assert replayed == [] and torn is None
    for i in range(count):
        log.append([_event(i)])
    log.close()


def _record_offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    offsets, offset = [], len(MAGIC)
    while offset < len(data):
        offsets.append(offset)
        offset += 8 + int.from_bytes(data[offset : offset + 4], "big")
    return offsets


def test_round_trip_and_reopen_appends(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    _write(path, 3)
    log, replayed, torn = EventLog.open(path)
    assert [e.idx for e in replayed] == [0, 1, 2]
    assert torn is None
    log.append([_event(3), _event(4)])
    log.close()
    assert [e.idx for e in read_events(path)] == [0, 1, 2, 3, 4]


def test_file_is_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    _write(path, 1)
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_truncated_tail_recovers_to_last_whole_record(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "events.log"
    _write(path, 3)
    whole = path.read_bytes()
    last = _record_offsets(path)[-1]
    path.write_bytes(whole[: last + cut])
    log, replayed, torn = EventLog.open(path)
    assert [e.idx for e in replayed] == [0, 1]
    assert torn is not None and torn.offset == last
    assert "torn record" in torn.describe(path)
    # the tail is gone on disk and appends continue cleanly after the last whole record
    log.append([_event(2)])
    log.close()
    assert [e.idx for e in read_events(path)] == [0, 1, 2]


def test_bad_checksum_on_final_record_is_a_torn_write(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    _write(path, 2)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    _, replayed, torn = EventLog.open(path)
    assert [e.idx for e in replayed] == [0]
    assert torn is not None and torn.reason == "bad checksum"


def test_corrupt_middle_refuses_with_offset_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    _write(path, 3)
    middle = _record_offsets(path)[1]
    data = bytearray(path.read_bytes())
    data[middle + 10] ^= 0xFF
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(EventLogCorrupt, match=f"offset {middle}") as info:
        EventLog.open(path)
    assert info.value.offset == middle
    assert path.read_bytes() == before


def test_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    path.write_bytes(b"definitely not an event log")
    with pytest.raises(EventLogCorrupt, match="bad magic"):
        EventLog.open(path)


def test_crash_while_writing_magic_is_an_empty_log(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    path.write_bytes(MAGIC[:3])
    log, replayed, torn = EventLog.open(path)
    assert replayed == [] and torn is not None
    log.append([_event(0)])
    log.close()
    assert [e.idx for e in read_events(path)] == [0]
