"""A local manager run as a real process for the tests (``python -m
skulk_host.plugin_manager serve``), killed and restarted at will."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from skulk_host.plugin_manager.client import call

REPO_ROOT = Path(__file__).resolve().parents[2]


def wait_until_answering(
    root: Path, process: subprocess.Popen[Any], log: Path, seconds: float = 60
) -> None:
    """Until the manager at ``root`` answers ``list`` (its process still running).

    A cheap probe on purpose: ``skulk-plugin-service status`` verifies the whole staged
    runtime (every file's SHA-256) each time, so polling it while a sealed
    manager starts (its bootstrap walking the same seal) cost seconds of CPU a poll.
    Tests ask ``status`` once the manager answers."""
    deadline = time.monotonic() + seconds
    while True:
        assert process.poll() is None, log.read_text()
        with contextlib.suppress(Exception):
            if call(root, {"action": "list"}, timeout=2)["ok"]:
                return
        assert time.monotonic() < deadline, f"the manager never answered:\n{log.read_text()}"
        time.sleep(0.2)


class Manager:
    def __init__(self, root: Path, *extra: str) -> None:
        self.root = root
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Manager:
        with (self.root.parent / "manager.log").open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "skulk_host.plugin_manager",
                    "serve",
                    "--root",
                    str(self.root),
                    *self.extra,
                ],
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, (self.root.parent / "manager.log").read_text()
            with contextlib.suppress(Exception):
                if call(self.root, {"action": "list"}, timeout=2)["ok"]:
                    return self
            assert time.monotonic() < deadline, "the manager never answered"
            time.sleep(0.1)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    @property
    def log(self) -> str:
        return (self.root.parent / "manager.log").read_text()

    def __call__(self, **request: Any) -> dict[str, Any]:
        return call(self.root, request)
