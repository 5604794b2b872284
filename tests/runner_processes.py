"""The runner processes under a process, read the way a test can rely on.

A runner may exit between psutil listing it and the test reading its command line
(a deleted instance, a crash under test); such a process is simply not a runner any
more, never an error in the test.
"""

from __future__ import annotations

import psutil

RUNNER_MODULE = "skulk_daemon.runner"


def runner_processes(parent: psutil.Process | int | None = None) -> list[psutil.Process]:
    """The live runner processes below ``parent`` (a pid, a process, or this one),
    with any process whose command line names a runner, forks of runners included."""
    root = parent if isinstance(parent, psutil.Process) else psutil.Process(parent)
    found = []
    for child in root.children(recursive=True):
        try:
            if RUNNER_MODULE in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # gone (or a zombie) since it was listed
            continue
    return found
