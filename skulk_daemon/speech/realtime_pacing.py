"""How long a realtime call may hold its runner without sending audio.

A realtime call reserves the only transcription slot of its instance until its input
half-closes; the call's own timeout is minutes. Live audio keeps pace with the wall
clock, so the input is held to that: once the time spent waiting for the caller's
audio exceeds the audio received by more than :data:`MAX_INPUT_LAG_SECONDS`, the call is
ended with ``timeout``. A caller that appends once and goes quiet, or trickles a few samples
every few seconds, gives the slot back within seconds instead of holding it for the
call's timeout; audio sent faster than real time (a file) is never held back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Final

from skulk_core.extensions.capabilities import CapabilityStreamFrame, InlineMediaAttachment

MAX_INPUT_LAG_SECONDS: Final = 10.0
"""How far behind the wall clock a call's audio may fall before the call is ended."""
MIN_WAIT_SECONDS: Final = 0.05
"""The shortest wait for a frame, so one already queued is always taken."""


class InputStalled(Exception):
    """The caller's audio fell too far behind the wall clock."""


async def paced(
    frames: AsyncIterator[CapabilityStreamFrame],
    *,
    bytes_per_second: int,
    max_lag: float = MAX_INPUT_LAG_SECONDS,
) -> AsyncGenerator[CapabilityStreamFrame, None]:
    """``frames`` as they come, until the input half-closes; raises :class:`InputStalled`
    when the time spent waiting for the caller exceeds the audio it sent (PCM at
    ``bytes_per_second``) by more than ``max_lag``."""
    # NOTE: only the time spent waiting on the caller counts: while the consumer is busy
    # (a runner pipe applying backpressure), frames queue up and the caller is not late.
    loop = asyncio.get_running_loop()
    waited = 0.0
    received = 0
    while True:
        allowance = received / bytes_per_second + max_lag - waited
        started = loop.time()
        # NOTE: asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a
        # cancellation that lands as a frame arrives, and the pump then outlived the
        # call (holding the instance's only slot) until the input stalled.
        try:
            async with asyncio.timeout(max(allowance, MIN_WAIT_SECONDS)):
                frame = await anext(frames)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise InputStalled(
                f"no audio for {max_lag:g} s of the utterance's time: the turn is ended"
            ) from None
        waited += loop.time() - started
        if frame.kind == "chunk" and isinstance(frame.media, InlineMediaAttachment):
            received += len(frame.media.data)
        yield frame
