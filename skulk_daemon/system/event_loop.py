"""The daemon's event loop: asyncio's own, or uvloop where an operator opts in.

Every streamed token costs the daemon a few event-loop wake-ups (the runner's pipe,
the tasks that shape the token, the socket write); uvloop's loop and transports are
written in C. Measured (bench/README.md): 0.330 -> 0.274 ms a token one stream at a
time in one run each on a loaded machine, but no difference with 8 streams at once on
a quiet one (0.082 vs 0.081 ms). It is opt-in (``SKULK_EVENT_LOOP=uvloop``), not the
default: at the demo's pace with 8 streams at once it measured inside asyncio's spread
(0.098 against 0.114 ms a token), and under it the daemon held 424 MiB for one
realtime session of 64 MiB of audio (the suite's bound is 5x the audio; asyncio's
loop stays inside it). Under it the suite also once found a burst of mDNS
announcements partly lost: discovery dropped what arrived while 16 resolved, which
uvloop, reading many datagrams a wake-up, made likely; the burst now waits its turn.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

EVENT_LOOP_ENV: Final = "SKULK_EVENT_LOOP"
"""``uvloop`` opts in to uvloop's loop; anything else (or unset) runs asyncio's."""


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when ``SKULK_EVENT_LOOP=uvloop`` and uvloop imports, else
    None (asyncio's default)."""
    if os.environ.get(EVENT_LOOP_ENV, "").strip().lower() != "uvloop":
        return None
    try:
        # NOTE: by name, so the type checker needs uvloop neither present nor absent.
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        log.warning(
            "%s=uvloop, but uvloop is not installed: running asyncio's loop", EVENT_LOOP_ENV
        )
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: which loop runs (for the start-up log line)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
