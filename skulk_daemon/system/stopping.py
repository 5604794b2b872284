"""A stop that ends: the first SIGINT/SIGTERM starts a graceful stop under a deadline,
a second one exits at once (as uvicorn treats a second Ctrl-C).

The graceful path names each step it enters (:meth:`StopGuard.step`), so when the
deadline passes, or the operator loses patience, the log says what the stop was
still waiting for. The deadline runs on a thread, not the event loop: a loop that
waits forever on a peer that never answers (or is itself blocked) cannot delay it.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Final

log = logging.getLogger("skulk")

STOP_DEADLINE_SECONDS: Final = 60.0
"""The longest a graceful stop may take: above the budgets inside it (uvicorn's 10 s
for open connections, the extensions' 30 s ``on_stop`` budget, 5 s to flush reports),
below systemd's default 90 s before SIGKILL."""
EXIT_STOP_ABANDONED: Final = 1
"""The exit status when the stop was cut short (deadline or a second signal)."""


class StopGuard:
    def __init__(
        self,
        deadline_seconds: float | None = None,
        *,
        exit_now: Callable[[int], object] = os._exit,
    ) -> None:
        self.deadline_seconds = (
            STOP_DEADLINE_SECONDS if deadline_seconds is None else deadline_seconds
        )
        self._exit_now = exit_now
        self._waiting_for = "the HTTP server to stop"
        self._signalled_at: float | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    @property
    def stopping(self) -> bool:
        return self._signalled_at is not None

    def step(self, what: str) -> None:
        """The graceful stop now waits for ``what`` (a phrase: "the fabric to close")."""
        self._waiting_for = what

    def signalled(self, signame: str) -> bool:
        """A stop signal arrived. Returns True for the first one (stop gracefully);
        on a second one it exits the process and does not return."""
        with self._lock:
            first = self._signalled_at is None
            if first:
                self._signalled_at = time.monotonic()
                self._timer = threading.Timer(self.deadline_seconds, self._deadline_passed)
                self._timer.daemon = True
                self._timer.start()
        if first:
            self._arm_second_signal()
            log.info(
                "received %s, stopping (at most %.0f s; a second signal exits at once)",
                signame,
                self.deadline_seconds,
            )
            return True
        self._abandon(f"received {signame} again: exiting now")
        return False

    def _arm_second_signal(self) -> None:
        # NOTE: asyncio runs its signal callbacks on the loop, so a loop that is blocked
        # would never see the second signal; a plain handler runs on the main thread
        # between bytecodes (even inside time.sleep), whatever the loop is doing.
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._second_signal)

    def _second_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signalled(signal.Signals(signum).name)

    def done(self) -> None:
        """The graceful stop finished: the deadline no longer applies."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _deadline_passed(self) -> None:
        self._abandon(f"the stop did not finish within {self.deadline_seconds:g} s")

    def _abandon(self, why: str) -> None:
        elapsed = 0.0 if self._signalled_at is None else time.monotonic() - self._signalled_at
        log.error(
            "%s (after %.1f s), still waiting for %s; exiting without it",
            why,
            elapsed,
            self._waiting_for,
        )
        # Where every thread was: the evidence a hung stop leaves behind.
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        logging.shutdown()
        self._exit_now(EXIT_STOP_ABANDONED)
