"""The daemon's event loop: uvloop when it is installed, else asyncio's own.

Every streamed token costs the daemon a few event-loop wake-ups (the runner's pipe,
the tasks that shape the token, the socket write); uvloop's loop and transports are
written in C and cut that cost (issue 43). It is optional: without it, or with
``SKULK_EVENT_LOOP=asyncio`` (to compare, or to rule it out), the standard loop runs.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable
from typing import Final

EVENT_LOOP_ENV: Final = "SKULK_EVENT_LOOP"
"""``asyncio`` forces the standard loop; anything else (or unset) prefers uvloop."""


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when uvloop is importable and not ruled out, else None
    (asyncio's default)."""
    if os.environ.get(EVENT_LOOP_ENV, "").strip().lower() == "asyncio":
        return None
    try:
        # NOTE: by name, so the type checker needs uvloop neither present nor absent.
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: which loop runs (for the start-up log line)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
