"""``GET /state`` and the ``GET /events`` export."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from itertools import islice

import msgspec
from litestar import Controller, MediaType, get
from litestar.response import Stream

from skulk_core.state.wire import render_state
from skulk_core.wire import JsonValue, to_wire
from skulk_daemon.node.eventlog import read_events
from skulk_daemon.node.node import Node

_json = msgspec.json.Encoder()
# Events are read off disk in batches so a long log never sits in memory at once.
_EXPORT_BATCH = 256


class StateController(Controller):
    tags = ("State",)

    @get("/state", summary="The cluster state as this node sees it")
    async def state(self, node: Node) -> dict[str, JsonValue]:
        view = node.view()
        return render_state(view.state, view.telemetry, view.health, datetime.now(UTC))

    @get("/events", summary="The retained event log as one JSON array", media_type=MediaType.JSON)
    async def events(self, node: Node) -> Stream:
        if not node.config.logging.event_log:
            return Stream(iter([b"[]"]), media_type=MediaType.JSON)
        return Stream(_export(node), media_type=MediaType.JSON)


async def _export(node: Node) -> AsyncIterator[bytes]:
    # NOTE: read the file, not State: State keeps the result of events, not the events.
    events = read_events(node.event_log.path)
    yield b"["
    first = True
    while True:
        batch = await asyncio.to_thread(lambda: [to_wire(e) for e in islice(events, _EXPORT_BATCH)])
        if not batch:
            break
        for item in batch:
            yield (b"" if first else b",") + _json.encode(item)
            first = False
    yield b"]"
