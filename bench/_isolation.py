"""Each side of an A/B benchmark measured with the other quiescent, or not at all.

Alternating two servers in one run cancels slow drift, but only while neither
side's work leaks into the other's turn: a Skulk runner that re-decodes a reply
after answering (the bit-exact mode's settle), or a llama.cpp thread pool still
spinning after its last decode, lands on the *next* side's measurement. Measured
in May 2026, that leak alone turned an isolated 0.955x decode ratio into a
reported 1.395x.

:class:`Isolation` runs each measured call only once every side is idle (its
processes' CPU time flat over a short window, after ``gap_s``), records the
1-minute load average before it, and checks afterwards that every *other* side's
CPU time stayed flat while it ran. A side that was not quiescent makes the run
fail loudly (:class:`NotQuiescent`), never quietly worse.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import psutil

QUIET_WINDOW_S: Final = 0.5
"""How long a side's CPU time must stay (nearly) flat to count as idle."""
QUIET_CPU_S: Final = 0.02
"""CPU seconds a side may spend over a quiet window (its event loop's timers,
telemetry ticks) and still count as idle."""
IDLE_TIMEOUT_S: Final = 30.0
"""How long to wait for a side to go idle before failing."""
LEAK_BASE_S: Final = 0.05
LEAK_SHARE: Final = 0.03
"""What another side may spend while one is measured: ``LEAK_BASE_S`` plus
``LEAK_SHARE`` of the measured run's wall time (background timers), no more."""

T = TypeVar("T")


class NotQuiescent(RuntimeError):
    """A side did work while the other was being measured: the figures would be biased."""


class Side:
    """One side's processes: ``pids()`` (re-read each time: a runner may restart),
    each with its children, or ``threads`` of this process (an in-process peer whose
    library threads are the ones to watch)."""

    def __init__(
        self,
        name: str,
        pids: Callable[[], Sequence[int]] = tuple,
        *,
        threads: Callable[[], Sequence[int]] | None = None,
    ) -> None:
        self.name = name
        self._pids = pids
        self._threads = threads

    def cpu_seconds(self) -> float:
        """User plus system CPU seconds of the side's processes (and their children),
        or of the named threads of this process."""
        total = 0.0
        if self._threads is not None:
            wanted = set(self._threads())
            for thread in psutil.Process().threads():
                if thread.id in wanted:
                    total += thread.user_time + thread.system_time
            return total
        for pid in self._pids():
            try:
                process = psutil.Process(pid)
                family = [process, *process.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for member in family:
                try:
                    times = member.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                total += times.user + times.system
        return total


def children_with(argument: str) -> Callable[[], Sequence[int]]:
    """The pids of this process's descendants whose command line holds ``argument``
    (a peer server started by the benchmark, told apart by its port), as a
    :class:`Side`'s ``pids``."""

    def pids() -> Sequence[int]:
        found = []
        for child in psutil.Process().children(recursive=True):
            try:
                if argument in child.cmdline():
                    found.append(child.pid)
            except psutil.NoSuchProcess:
                continue
        return found

    return pids


def native_threads() -> Callable[[], Sequence[int]]:
    """The native ids of this process's threads that Python did not start (a C
    library's thread pool: llama.cpp's), as a :class:`Side`'s ``threads``."""
    own = {os.getpid()}

    def ids() -> Sequence[int]:
        python = {t.native_id for t in threading.enumerate() if t.native_id is not None}
        return [t.id for t in psutil.Process().threads() if t.id not in python | own]

    return ids


def daemon_side(name: str, process: subprocess.Popen[Any] | None) -> Side:
    """A served side: a daemon ``process`` started by the benchmark, with its runners
    (its children, re-read each time)."""
    assert process is not None, "the daemon is not running"
    return Side(name, lambda: [process.pid])


def in_process_side(name: str) -> Side:
    """A peer loaded in this process: the C library's threads are what it runs on."""
    return Side(name, threads=native_threads())


@dataclass
class RunRecord:
    side: str
    load_1m: float
    """The 1-minute load average just before the run."""
    idle_wait_s: float
    """How long the sides took to go idle before it."""
    wall_s: float
    others_cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds each other side spent while it ran (checked against the bound)."""


@dataclass
class Isolation:
    sides: Sequence[Side]
    gap_s: float = 3.0
    """Pause between runs (after the previous run, before the idle check)."""
    records: list[RunRecord] = field(default_factory=list)

    def wait_idle(self) -> float:
        """Until every side's CPU time is flat over :data:`QUIET_WINDOW_S`; the
        seconds it took. Raises :class:`NotQuiescent` after :data:`IDLE_TIMEOUT_S`."""
        started = time.monotonic()
        busy: list[str] = []
        while time.monotonic() - started < IDLE_TIMEOUT_S:
            before = [side.cpu_seconds() for side in self.sides]
            time.sleep(QUIET_WINDOW_S)
            after = [side.cpu_seconds() for side in self.sides]
            busy = [
                f"{side.name} ({(b - a) * 1000:.0f} ms CPU in {QUIET_WINDOW_S:g} s)"
                for side, a, b in zip(self.sides, before, after, strict=True)
                if b - a > QUIET_CPU_S
            ]
            if not busy:
                return time.monotonic() - started
        raise NotQuiescent(f"never idle within {IDLE_TIMEOUT_S:g} s: {', '.join(busy)}")

    def run(self, name: str, measure: Callable[[], T]) -> T:
        """``measure()`` as side ``name``'s run, with every other side checked quiescent."""
        time.sleep(self.gap_s)
        idle = self.wait_idle()
        others = [side for side in self.sides if side.name != name]
        load = os.getloadavg()[0]
        before = [side.cpu_seconds() for side in others]
        started = time.perf_counter()
        result = measure()
        wall = time.perf_counter() - started
        spent = {side.name: side.cpu_seconds() - b for side, b in zip(others, before, strict=True)}
        record = RunRecord(name, round(load, 2), round(idle, 2), round(wall, 3), spent)
        self.records.append(record)
        bound = LEAK_BASE_S + LEAK_SHARE * wall
        leaked = {side: cpu for side, cpu in spent.items() if cpu > bound}
        if leaked:
            detail = ", ".join(f"{side} spent {cpu * 1000:.0f} ms" for side, cpu in leaked.items())
            raise NotQuiescent(
                f"while {name} was measured ({wall:.2f} s) {detail} of CPU (bound "
                f"{bound * 1000:.0f} ms): its work would bias {name}'s figures"
            )
        print(
            f"  {name}: load {load:.2f} before, idle after {idle:.2f} s, {wall:.2f} s, others "
            + ", ".join(f"{k} {v * 1000:.0f} ms CPU" for k, v in spent.items()),
            file=sys.stderr,
        )
        return result

    def loads(self, name: str) -> list[float]:
        return [r.load_1m for r in self.records if r.side == name]

    def report(self) -> dict[str, Any]:
        """What the JSON report keeps: every run's load, idle wait and leak check."""
        return {
            "gap_s": self.gap_s,
            "runs": [
                {
                    "side": r.side,
                    "load_1m": r.load_1m,
                    "idle_wait_s": r.idle_wait_s,
                    "wall_s": r.wall_s,
                    "others_cpu_ms": {k: round(v * 1000, 1) for k, v in r.others_cpu_s.items()},
                }
                for r in self.records
            ],
        }


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, p90, min and max of one side's per-run figures."""
    if not values:
        return {}
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "median": round(statistics.median(ordered), 2),
        "p90": round(p90, 2),
        "min": round(ordered[0], 2),
        "max": round(ordered[-1], 2),
    }


def spread_text(values: Sequence[float]) -> str:
    s = spread(values)
    return f"{s['median']:.2f} (p90 {s['p90']:.2f}, {s['min']:.2f}-{s['max']:.2f})" if s else "-"
