"""The ``tailscale status --json`` probe: a real subprocess under a deadline.

Without the ``tailscale`` binary (or with tailscaled stopped, wedged or answering
nonsense) the answer is an honest ``running: false``. A dashboard polls this, so one
answer is reused for :data:`CACHE_SECONDS` and probes never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import Callable
from typing import Final

from skulk_core.cluster.remote_access import NOT_RUNNING, TailscaleStatus, parse_tailscale_status

TAILSCALE_BINARY: Final = "tailscale"
PROBE_TIMEOUT_SECONDS: Final = 5.0
"""tailscaled answers a local status query in milliseconds; one that takes longer is
wedged, and the dashboard must not wait on it."""
MAX_STATUS_BYTES: Final = 8 * 1024 * 1024
"""``status --json`` lists every peer; a tailnet of thousands fits well under this."""
CACHE_SECONDS: Final = 2.0
_CHUNK: Final = 64 * 1024


async def _read_bounded(stream: asyncio.StreamReader) -> bytes | None:
    data = bytearray()
    while chunk := await stream.read(_CHUNK):
        data += chunk
        if len(data) > MAX_STATUS_BYTES:
            return None
    return bytes(data)


async def probe_tailscale(binary: str = TAILSCALE_BINARY) -> TailscaleStatus:
    """Run ``tailscale status --json`` once and read what it says about this node."""
    path = shutil.which(binary)
    if path is None:
        return NOT_RUNNING
    try:
        process = await asyncio.create_subprocess_exec(
            path,
            "status",
            "--json",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError:
        return NOT_RUNNING
    assert process.stdout is not None
    try:
        raw = await asyncio.wait_for(_read_bounded(process.stdout), PROBE_TIMEOUT_SECONDS)
    except TimeoutError:
        raw = None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        await process.wait()
    # NOTE: the exit status is not consulted: a stopped tailscaled still prints a
    # status document (BackendState "Stopped"), and one that is unreachable prints none.
    return NOT_RUNNING if raw is None else parse_tailscale_status(raw)


class TailscaleProbe:
    """:func:`probe_tailscale`, one at a time, each answer reused briefly."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = asyncio.Lock()
        self._cached: tuple[float, TailscaleStatus] | None = None

    async def status(self) -> TailscaleStatus:
        async with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached[0] < CACHE_SECONDS:
                return self._cached[1]
            status = await probe_tailscale()
            self._cached = (self._clock(), status)
            return status
