"""Restarting the node in place: a graceful stop, then ``os.execv`` of the same argv.

``POST /admin/restart`` only asks (:meth:`RestartLatch.request`); ``serve.py`` attached
the stop it triggers, and once the stop has finished cleanly ``main`` calls
:func:`reexec`. The process keeps its pid; the node keeps its id and its placements
because both are on disk (the identity key, the event log), not in memory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from typing import Final, NoReturn

log = logging.getLogger("skulk")

RESTART_GRACE_SECONDS: Final = 0.5
"""How long after the request the stop begins: the answer leaves before the listener
closes, and a second request in that window is told a restart is already pending."""


class RestartPending(Exception):
    """A local restart is already scheduled (HTTP 409 ``restart_already_pending``)."""


class RestartUnavailable(Exception):
    """Nothing can restart this process: it was not started by ``serve.py``."""


class RestartLatch:
    """Whether a restart was asked for, and how to begin the stop it needs."""

    def __init__(self) -> None:
        self._stop: Callable[[], None] | None = None
        self._requested = False

    @property
    def requested(self) -> bool:
        return self._requested

    def attach(self, stop: Callable[[], None]) -> None:
        """``stop`` begins the node's graceful stop (what SIGTERM begins)."""
        self._stop = stop

    def request(self) -> None:
        """Schedule the stop that ends in a re-exec; on the event loop."""
        stop = self._stop
        if stop is None:
            raise RestartUnavailable("this node was not started by `skulk serve`")
        # NOTE: checked and set with no await between them, on the loop: two requests
        # cannot both schedule a stop.
        if self._requested:
            raise RestartPending("a restart of this node is already pending")
        self._requested = True
        asyncio.get_running_loop().call_later(RESTART_GRACE_SECONDS, stop)


def reexec(argv: list[str] | None = None) -> NoReturn:
    """Replace this process with a fresh run of the same command line (same pid).

    ``sys.orig_argv`` is the interpreter's own argv (``python -m skulk_daemon ...``,
    interpreter flags included), so a node started any way restarts the same way.
    """
    command = list(sys.orig_argv if argv is None else argv)
    log.info("restarting in place: %s", " ".join(command))
    # Python opens every descriptor non-inheritable, so exec closes them; what is
    # buffered must be written first.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)
