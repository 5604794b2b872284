"""This daemon's process tree: itself, its runners and their helpers, with RSS and CPU.

psutil reads ``/proc``; a process that exits while it is read is left out. CPU
percentages need two readings, so each process's psutil handle is kept between
calls (the first reading of a new process reports 0.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psutil

_handles: dict[int, psutil.Process] = {}


def process_tree(runner_pids: Mapping[int, str]) -> list[dict[str, Any]]:
    """The daemon first, then every descendant, each with its role."""
    me = psutil.Process()
    try:
        children = me.children(recursive=True)
    except psutil.Error:
        children = []
    tree: list[dict[str, Any]] = []
    alive: set[int] = set()
    for process in (me, *children):
        handle = _handles.setdefault(process.pid, process)
        alive.add(process.pid)
        try:
            with handle.oneshot():
                cmdline = handle.cmdline()
                entry: dict[str, Any] = {
                    "pid": handle.pid,
                    "ppid": handle.ppid(),
                    "role": _role(handle.pid, me.pid, cmdline, runner_pids),
                    "name": handle.name(),
                    "status": handle.status(),
                    "rssBytes": handle.memory_info().rss,
                    "cpuPercent": round(handle.cpu_percent(None), 1),
                    "cpuSeconds": round(sum(handle.cpu_times()[:2]), 3),
                    "threads": handle.num_threads(),
                }
        except psutil.Error:
            continue
        runner_id = runner_pids.get(handle.pid)
        if runner_id is not None:
            entry["runnerId"] = runner_id
        tree.append(entry)
    for pid in set(_handles) - alive:
        del _handles[pid]
    return tree


def _role(pid: int, daemon: int, cmdline: list[str], runner_pids: Mapping[int, str]) -> str:
    if pid == daemon:
        return "daemon"
    joined = " ".join(cmdline)
    if pid in runner_pids or "skulk_daemon.runner" in joined:
        return "runner"
    if "rpc-server" in joined or "rpc_server" in joined:
        return "rpc_server"
    return "child"
