"""``GET /state`` and the ``GET /events`` export."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from itertools import islice

import msgspec
from litestar import Controller, MediaType, get
from litestar.response import Stream

from skulk_core.cluster.state_document import render_state
from skulk_core.cluster.telemetry import (
    NodeHealth,
    NodeIdentityInfo,
    NodeMemory,
    NodeResources,
    NodeSystem,
)
from skulk_core.extensions.capability_nodes import CapabilityNodeSummary
from skulk_core.ids import CommandId, InstanceId, TaskId
from skulk_core.models.cards import ModelCard
from skulk_core.state.events import IndexedEvent
from skulk_core.state.state import State, TaskStatus
from skulk_core.wire import JsonValue, to_wire
from skulk_daemon.api.authority import TRUSTED_CALLERS, caller_of, declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.disclosure import state_for
from skulk_daemon.api.openapi import JSON, OPENAI, documented, errors, wire_of
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.node.eventlog import read_events
from skulk_daemon.node.node import Node

_json = msgspec.json.Encoder()
# Events are read off disk in batches so a long log never sits in memory at once.
_EXPORT_BATCH = 256


class CapabilityNodeReading(CapabilityNodeSummary, frozen=True, kw_only=True):
    """A capability node as ``/state`` lists it: with when its host last reported."""

    observed_at: datetime


class TaskReading(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A task as ``/state`` lists it: its command id (what cancels it) only for callers
    on this machine or the trusted fabric."""

    task_id: TaskId
    command_id: CommandId | msgspec.UnsetType = msgspec.UNSET
    instance_id: InstanceId
    kind: str
    task_status: TaskStatus


class StateDocument(State, frozen=True, kw_only=True):
    """What ``GET /state`` answers (for the document; :func:`render_state` writes it):
    State, plus the telemetry kept beside it, per node id. Pinned cards are named by
    their digests (``instanceCardDigests``), never listed whole."""

    # The document narrows State's own fields to what is rendered (a subtype would
    # not: an id may be absent, the cards are digests), so these two override.
    tasks: dict[TaskId, TaskReading] = msgspec.field(default_factory=dict)  # type: ignore[assignment]
    instance_cards: dict[InstanceId, ModelCard] | msgspec.UnsetType = msgspec.UNSET  # type: ignore[assignment]
    instance_card_digests: dict[InstanceId, str] = msgspec.field(default_factory=dict)

    node_identities: dict[str, NodeIdentityInfo]
    node_memory: dict[str, NodeMemory]
    node_system: dict[str, NodeSystem]
    node_resources: dict[str, NodeResources]
    node_health: dict[str, NodeHealth]
    node_capabilities: dict[str, list[str]]
    capability_nodes: dict[str, list[CapabilityNodeReading]]


def without_command_ids(document: dict[str, JsonValue]) -> None:
    """Leave running tasks' command ids out of a ``/state`` document.

    A command id is what cancels a generation (``POST /v1/cancel/{id}``): it stays a
    capability of the client that received it, not something any reader learns.
    """
    tasks = document.get("tasks")
    if isinstance(tasks, dict):
        for task in tasks.values():
            if isinstance(task, dict):
                task.pop("commandId", None)


class StateController(Controller):
    tags = ("State",)
    opt = declare(Requirement.OPEN)

    @get(
        "/state",
        summary="The cluster state as this node sees it",
        responses=errors(OPENAI),
        operation_class=documented(ok={JSON: wire_of(StateDocument)}),
    )
    async def state(self, node: Node, request: HttpRequest) -> dict[str, JsonValue]:
        view = node.view()
        document = render_state(view.state, view.telemetry, view.health, datetime.now(UTC))
        if caller_of(request) not in TRUSTED_CALLERS:
            without_command_ids(document)
        state_for(request, document)
        return document

    @get(
        "/events",
        opt=declare(Requirement.TRUSTED_FABRIC),
        summary="The retained event log as one JSON array",
        media_type=MediaType.JSON,
        responses=errors(OPENAI),
        operation_class=documented(ok={JSON: wire_of(list[IndexedEvent])}),
    )
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
