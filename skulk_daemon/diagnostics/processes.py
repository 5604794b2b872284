"""This daemon's process tree: itself, its runners and their helpers, with RSS and CPU.

psutil reads ``/proc``; a process that exits while it is read is left out. CPU
percentages need two readings, so each process's psutil handle is kept between
calls (the first reading of a new process reports 0.0).
"""

from __future__ import annotations

from collections.abc import Mapping

import psutil

from skulk_core.diagnostics.bundle import ProcessEntry

_handles: dict[int, psutil.Process] = {}


def process_tree(runner_pids: Mapping[int, str]) -> list[ProcessEntry]:
    """The daemon first, then every descendant, each with its role."""
    me = psutil.Process()
    try:
        children = me.children(recursive=True)
    except psutil.Error:
        children = []
    tree: list[ProcessEntry] = []
    alive: set[int] = set()
    for process in (me, *children):
        handle = _handles.setdefault(process.pid, process)
        alive.add(process.pid)
        try:
            with handle.oneshot():
                cmdline = handle.cmdline()
                entry = ProcessEntry(
                    pid=handle.pid,
                    ppid=handle.ppid(),
                    role=_role(handle.pid, me.pid, cmdline, runner_pids),
                    name=handle.name(),
                    status=handle.status(),
                    rss_bytes=handle.memory_info().rss,
                    cpu_percent=round(handle.cpu_percent(None), 1),
                    cpu_seconds=round(sum(handle.cpu_times()[:2]), 3),
                    threads=handle.num_threads(),
                    runner_id=runner_pids.get(handle.pid),
                )
        except psutil.Error:
            continue
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
