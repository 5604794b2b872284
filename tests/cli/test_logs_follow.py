"""`skulk logs -f` reads like `tail -n N -F`: the last lines, then every line the node
appends, a line still being written printed once it ends, and a rotated file followed
from its start. A thread plays the node writing the file."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

from skulk_cli.commands.logs import follow

POLL = 0.01


def take(lines: Iterator[str], count: int) -> list[str]:
    return [next(lines) for _ in range(count)]


def test_last_lines_then_appended_ones_none_lost(tmp_path: Path) -> None:
    path = tmp_path / "skulk.log"
    path.write_text("one\ntwo\nthree\n")
    lines = follow(path, 2, poll=POLL)
    assert take(lines, 2) == ["two", "three"]
    # Written after the last lines were read and before the follow loop polls: the
    # same open file sees them, so none is lost.
    with path.open("a") as log:
        log.write("four\nfive\n")
    assert take(lines, 2) == ["four", "five"]
    lines.close()


def test_a_line_being_written_is_printed_once_whole(tmp_path: Path) -> None:
    path = tmp_path / "skulk.log"
    path.write_text("done\nhalf a li")
    lines = follow(path, 5, poll=POLL)
    assert next(lines) == "done"

    def finish() -> None:
        with path.open("a") as log:
            log.write("ne\nnext\n")

    finisher = threading.Timer(0.05, finish)
    finisher.start()
    assert take(lines, 2) == ["half a line", "next"]
    finisher.join()
    lines.close()


def test_no_last_lines_starts_at_the_end_and_follows_a_rotation(tmp_path: Path) -> None:
    path = tmp_path / "skulk.log"
    path.write_text("old\n")
    lines = follow(path, 0, poll=POLL)

    def rotate() -> None:
        path.rename(tmp_path / "skulk.log.1")
        path.write_text("fresh\n")

    rotator = threading.Timer(0.05, rotate)
    rotator.start()
    assert next(lines) == "fresh"
    rotator.join()
    lines.close()
