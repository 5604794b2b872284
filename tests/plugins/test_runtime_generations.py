"""Removing unused manager runtime generations (``plugin_service/generations.py``), on
small real generation directories (a completion record and a few files each; the staging of real
copies is covered by ``test_manager_refresh.py``).

Proves: the keep-set is exactly the selected generation, each generation a running
manager starts from and the newest other complete one; interrupted copies and older
complete ones go, a read-only directory inside included, and a half-finished removal
is finished; a fence held by another process (a staging in progress) defers removal and
touches nothing; a refused candidate is removed, never the selected or a running one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import msgspec

from skulk_host.files import atomic_write
from skulk_host.plugin_service.generations import REMOVING_PREFIX, collect, discard, keep_set
from skulk_host.plugin_service.runtime import (
    COMPLETE_FILE,
    Completion,
    runtimes,
    select,
    selected,
)


def _generation(root: Path, name: str, completed_at: int | None) -> Path:
    path = runtimes(root) / name
    (path / "lib" / "pkg").mkdir(parents=True)
    (path / "lib" / "pkg" / "module.py").write_text("x = 1\n")
    if completed_at is not None:
        completion = Completion(
            generation=name,
            seal_sha256="0" * 64,
            build_sha256="1" * 64,
            source_sha256="2" * 64,
            files=1,
            bytes=6,
            completed_at=completed_at,
        )
        atomic_write(path / COMPLETE_FILE, msgspec.json.encode(completion), mode=0o400)
    return path


def _names(root: Path) -> set[str]:
    return {p.name for p in runtimes(root).iterdir() if p.name not in (".fence", "current")}


def test_collect_keeps_exactly_the_keep_set(tmp_path: Path) -> None:
    now = int(time.time())
    old, older, previous, chosen, running = "a" * 16, "b" * 16, "c" * 16, "d" * 16, "e" * 16
    _generation(tmp_path, older, now - 300)
    _generation(tmp_path, old, now - 200)
    _generation(tmp_path, previous, now - 100)
    _generation(tmp_path, chosen, now)
    _generation(tmp_path, running, now - 400)
    interrupted = _generation(tmp_path, "f" * 16, None)  # no completion: interrupted
    readonly = _generation(tmp_path, "9" * 16, now - 500) / "lib" / "pkg"
    readonly.chmod(0o500)
    leftover = runtimes(tmp_path) / f"{REMOVING_PREFIX}{'8' * 16}.abcd"
    (leftover / "bin").mkdir(parents=True)
    select(tmp_path, chosen)
    assert keep_set(tmp_path, {running}) == {chosen, running, previous}

    collected = collect(tmp_path, {running})

    assert collected is not None
    assert set(collected.kept) == {chosen, running, previous}
    assert set(collected.removed) == {old, older, "f" * 16, "9" * 16}
    assert _names(tmp_path) == {chosen, running, previous}
    assert not interrupted.exists() and not leftover.exists()
    assert selected(tmp_path) == chosen
    # Nothing left to remove: a second pass keeps the same set.
    again = collect(tmp_path, {running})
    assert again is not None and again.removed == ()


HOLD_FENCE = """
import sys, time
from pathlib import Path
from skulk_host.plugin_service.runtime import fence
with fence(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_busy_fence_defers_removal(tmp_path: Path) -> None:
    now = int(time.time())
    _generation(tmp_path, "a" * 16, now)
    _generation(tmp_path, "b" * 16, now - 10)
    _generation(tmp_path, "c" * 16, now - 20)
    _generation(tmp_path, "f" * 16, None)  # what a staging in progress looks like
    select(tmp_path, "a" * 16)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_FENCE, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert collect(tmp_path, set()) is None
        assert discard(tmp_path, "b" * 16, set()) is False
        assert _names(tmp_path) == {"a" * 16, "b" * 16, "c" * 16, "f" * 16}
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    collected = collect(tmp_path, set())
    assert collected is not None and set(collected.removed) == {"c" * 16, "f" * 16}


def test_discard_removes_only_an_unused_candidate(tmp_path: Path) -> None:
    now = int(time.time())
    for name in ("a" * 16, "b" * 16, "c" * 16):
        _generation(tmp_path, name, now)
    select(tmp_path, "a" * 16)
    assert discard(tmp_path, "a" * 16, set()) is False  # selected
    assert discard(tmp_path, "b" * 16, {"b" * 16}) is False  # a manager runs it
    assert discard(tmp_path, "c" * 16, {"b" * 16}) is True
    assert _names(tmp_path) == {"a" * 16, "b" * 16}
