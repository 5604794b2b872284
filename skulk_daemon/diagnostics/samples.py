"""Process samples for a capture: what each process's threads are doing, repeatedly.

The Linux counterpart of macOS ``sample``: every ~100 ms, for each process, its CPU,
RSS and each thread's state and kernel wait channel (``/proc/<pid>/task/*``). What
cannot be read (a process gone, ``/proc`` closed) is a partial failure, not an error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import psutil

from skulk_core.diagnostics.answers import PartialFailure, ProcessSample, ThreadSample

SAMPLE_INTERVAL_SECONDS: Final = 0.1
MAX_SAMPLES: Final = 100
MAX_THREADS: Final = 64


def sample_processes(
    pids: Sequence[int], seconds: float
) -> tuple[list[ProcessSample], list[PartialFailure]]:
    samples: list[ProcessSample] = []
    failures: dict[str, str] = {}
    handles: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            handles[pid] = psutil.Process(pid)
            handles[pid].cpu_percent(None)
        except psutil.Error as exc:
            failures[f"process {pid}"] = type(exc).__name__
    count = max(1, min(MAX_SAMPLES, int(seconds / SAMPLE_INTERVAL_SECONDS)))
    for index in range(count):
        if index:
            time.sleep(SAMPLE_INTERVAL_SECONDS)
        for pid, handle in list(handles.items()):
            try:
                samples.append(
                    ProcessSample(
                        pid=pid,
                        at=round(time.time(), 3),
                        cpu_percent=round(handle.cpu_percent(None), 1),
                        rss_bytes=handle.memory_info().rss,
                        threads=_threads(pid),
                    )
                )
            except psutil.Error as exc:
                failures[f"process {pid}"] = f"{type(exc).__name__} while sampling"
                del handles[pid]
    return samples, [PartialFailure(what=w, error=e) for w, e in sorted(failures.items())]


def _threads(pid: int) -> list[ThreadSample]:
    threads: list[ThreadSample] = []
    try:
        tasks = sorted(Path(f"/proc/{pid}/task").iterdir())[:MAX_THREADS]
    except OSError:
        return threads
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            state = stat[stat.rindex(")") + 2 :].split(" ", 1)[0]
            wchan = (task / "wchan").read_text().strip() or "-"
        except (OSError, ValueError):
            continue
        threads.append(ThreadSample(tid=task.name, name=name, state=state, wchan=wchan))
    return threads
