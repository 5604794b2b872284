"""``POST /bench/chat/completions`` and the ``/bench/images/*`` routes.

A bench request runs the same admission and validation as its ordinary
counterpart, always non-streaming, and answers the normal response plus
``generation_stats`` (what the runner measured, with no node ids or backend tags)
and ``power_usage`` (average system power over the request, per node and in
total; ``null`` where the node cannot measure power).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
from litestar import Controller, MediaType, post
from litestar.response import Stream

from skulk_core.chat.generation import GenerationStats
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.embeddings import unless_disconnected
from skulk_daemon.api.images import EDIT_DOC, GENERATION_DOC, read_edit, read_generation
from skulk_daemon.api.openai_chat import LATE_ERROR, MAX_CHAT_BODY_BYTES
from skulk_daemon.api.openapi import (
    COMMAND_ID_HEADER,
    JSON,
    OPENAI,
    OpenAIError,
    documented,
    errors,
    json_of,
)
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.chat.openai_protocol import ChatCompletion, ChatCompletionRequest
from skulk_daemon.chat.openai_request import decode_chat_request, to_task
from skulk_daemon.chat.openai_wire import json_body, stats_fields
from skulk_daemon.chat.service import ChatService
from skulk_daemon.chat.turn import TurnEnd, TurnEvent
from skulk_daemon.embeddings.service import STATUS_CANCELLED
from skulk_daemon.errors import ApiError
from skulk_daemon.images.protocol import (
    MAX_EDIT_BODY_BYTES,
    ImageGenerationStats,
    ImagesResponse,
)
from skulk_daemon.images.service import AdmittedImages, ImageService
from skulk_daemon.node.node import Node
from skulk_daemon.telemetry.power import PowerMeter, PowerReading

_meter = PowerMeter()


class NodePower(msgspec.Struct, frozen=True, kw_only=True):
    watts: float
    sources: list[str]


class PowerUsage(msgspec.Struct, frozen=True, kw_only=True):
    nodes: dict[str, NodePower]
    total_watts: float


class BenchCompletion(ChatCompletion, frozen=True, kw_only=True):
    """What ``POST /bench/chat/completions`` answers (for the document: the route
    writes it from the completion and :func:`power_usage`)."""

    generation_stats: GenerationStats
    power_usage: PowerUsage | None


class BenchImages(ImagesResponse, frozen=True, kw_only=True):
    """What ``POST /bench/images/*`` answers."""

    generation_stats: ImageGenerationStats
    power_usage: PowerUsage | None


def power_usage(node: Node, reading: PowerReading | None) -> PowerUsage | None:
    if reading is None:
        return None
    return PowerUsage(
        nodes={str(node.node_id): NodePower(watts=reading.watts, sources=list(reading.sources))},
        total_watts=reading.watts,
    )


class BenchController(Controller):
    tags = ("Benchmark",)
    opt = declare(Requirement.OPEN)

    @post(
        "/bench/chat/completions",
        status_code=200,
        summary="A non-streaming chat completion plus generation stats and power usage",
        request_max_body_size=MAX_CHAT_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413),
        operation_class=documented(
            body=ChatCompletionRequest,
            ok={JSON: json_of(BenchCompletion, OpenAIError, description=LATE_ERROR)},
            headers=COMMAND_ID_HEADER,
        ),
    )
    async def bench_chat(
        self,
        request: HttpRequest,
        node: Node,
        chat: ChatService,
    ) -> Stream:
        body = msgspec.structs.replace(decode_chat_request(await request.body()), stream=False)
        admitted, events = await chat.open_plain_turn(to_task(body))
        begin = await _meter.start()
        reading: list[PowerReading | None] = []

        async def measured() -> AsyncIterator[TurnEvent]:
            async for event in events:
                if isinstance(event, TurnEnd):
                    reading.append(await _meter.stop(begin))
                yield event

        def extend(end: TurnEnd) -> dict[str, object]:
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
        "/bench/images/generations",
        status_code=200,
        summary="A non-streaming image generation plus generation stats and power usage",
        responses=errors(OPENAI, 400, 404, 413, STATUS_CANCELLED, 503),
        operation_class=GENERATION_DOC,
    )
    async def bench_generations(
        self, request: HttpRequest, node: Node, images: ImageService
    ) -> BenchImages:
        admitted = await read_generation(request, images, bench=True)
        return await _bench_images(request, node, images, admitted)

    @post(
        "/bench/images/edits",
        # Edits take multipart form data (the image), as OpenAI's do.
        opt=declare(Requirement.OPEN, json_body=False),
        status_code=200,
        summary="A non-streaming image edit plus generation stats and power usage",
        request_max_body_size=MAX_EDIT_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, STATUS_CANCELLED, 503),
        operation_class=EDIT_DOC,
    )
    async def bench_edits(
        self, request: HttpRequest, node: Node, images: ImageService
    ) -> BenchImages:
        admitted = await read_edit(request, images, bench=True)
        return await _bench_images(request, node, images, admitted)


async def _bench_images(
    request: HttpRequest, node: Node, images: ImageService, admitted: AdmittedImages
) -> BenchImages:
    begin = await _meter.start()
    outcome = await unless_disconnected(request, images.render(admitted, str(request.base_url)))
    reading = await _meter.stop(begin)
    if outcome is None:
        raise ApiError(STATUS_CANCELLED, "the client disconnected", code="client_disconnected")
    rendered = outcome[0]
    stats = rendered.stats
    if stats is None:
        raise ApiError(500, "the runner measured nothing", code="engine_failed")
    response = rendered.response
    return BenchImages(
        created=response.created,
        data=response.data,
        output_format=response.output_format,
        quality=response.quality,
        size=response.size,
        seed=response.seed,
        generation_stats=stats,
        power_usage=power_usage(node, reading),
    )
