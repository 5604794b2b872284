"""``python -m skulk_daemon`` whose stop hangs, under a short stop deadline.

The fabric's close never returns (as with a peer that never answers, or a network
that vanished under the daemon), or, with ``SKULK_TEST_HANG=loop``, it blocks the
event loop outright. Everything else is the real daemon and its real stop path;
the stop deadline is :data:`TEST_DEADLINE_SECONDS` instead of a minute. Run as
``python -m tests.daemon.hanging_stop_daemon`` (``DaemonProcess(launcher=HANGING_STOP_LAUNCHER)``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Final

from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.serve import main
from skulk_daemon.system import stopping

TEST_DEADLINE_SECONDS: Final = 4.0
HANGING_STOP_LAUNCHER: Final = ("-m", "tests.daemon.hanging_stop_daemon")


async def _close_never(self: ClusterAgent) -> None:
    if os.environ.get("SKULK_TEST_HANG") == "loop":
        time.sleep(3600)  # noqa: ASYNC251 -- the point: the whole loop wedged
    await asyncio.Event().wait()  # an await nothing will ever complete


if __name__ == "__main__":
    stopping.STOP_DEADLINE_SECONDS = TEST_DEADLINE_SECONDS  # type: ignore[misc]
    ClusterAgent.close = _close_never  # type: ignore[method-assign]
    sys.exit(main())
