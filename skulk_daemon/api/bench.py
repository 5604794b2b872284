"""``POST /bench/chat/completions`` and the ``/bench/images/*`` routes.

A bench request runs the same admission and validation as its ordinary
counterpart, always non-streaming, and answers the normal response plus
``generation_stats`` (what the runner measured, with no node ids or backend tags)
and ``power_usage`` (average system power over the request, per node and in
total; ``null`` where the node cannot measure power).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Controller, MediaType, Request, post
from litestar.response import Stream

from skulk_daemon.api.images import refuse_image_request
from skulk_daemon.api.openai_chat import MAX_CHAT_BODY_BYTES
from skulk_daemon.chat.openai_request import decode_chat_request, to_task
from skulk_daemon.chat.openai_wire import json_body, stats_fields
from skulk_daemon.chat.service import ChatService
from skulk_daemon.chat.turn import TurnEnd
from skulk_daemon.node.node import Node
from skulk_daemon.telemetry.power import PowerMeter, PowerReading

_meter = PowerMeter()


def power_usage(node: Node, reading: PowerReading | None) -> dict[str, Any] | None:
    if reading is None:
        return None
    return {
        "nodes": {str(node.node_id): {"watts": reading.watts, "sources": list(reading.sources)}},
        "total_watts": reading.watts,
    }


class BenchController(Controller):
    tags = ("Benchmark",)

    @post(
        "/bench/chat/completions",
        status_code=200,
        summary="A non-streaming chat completion plus generation stats and power usage",
        request_max_body_size=MAX_CHAT_BODY_BYTES,
    )
    async def bench_chat(
        self,
        request: Request[Any, Any, Any],
        node: Node,
        chat: ChatService,
    ) -> Stream:
        body = msgspec.structs.replace(decode_chat_request(await request.body()), stream=False)
        admitted, events = chat.open_plain_turn(to_task(body))
        begin = await _meter.start()
        reading: list[PowerReading | None] = []

        async def measured() -> AsyncIterator[Any]:
            async for event in events:
                if isinstance(event, TurnEnd):
                    reading.append(await _meter.stop(begin))
                yield event

        def extend(end: TurnEnd) -> dict[str, Any]:
            return {
                "generation_stats": stats_fields(end.stats),
                "power_usage": power_usage(node, reading[0] if reading else None),
            }

        return Stream(
            json_body(admitted, measured(), extend),
            media_type=MediaType.JSON,
            headers={"X-Skulk-Command-Id": admitted.command_id},
        )

    @post(
        ["/bench/images/generations", "/bench/images/edits"],
        status_code=200,
        summary="Image benchmarks: the same admission as the ordinary image routes",
    )
    async def bench_images(self, request: Request[Any, Any, Any]) -> None:
        await refuse_image_request(request)
