"""The tracing service behind ``/v1/tracing`` and ``/v1/traces*``: the cluster-wide
switch (ordered through State) and reads of this node's or every member's records."""

from __future__ import annotations

import asyncio
from typing import Final

import msgspec

from skulk_core.diagnostics.answers import Unreachable
from skulk_core.diagnostics.trace_answers import (
    ClusterTraces,
    DeletedTraces,
    NodeTraces,
    TracingState,
)
from skulk_core.diagnostics.traces import (
    TraceRecord,
    merge,
    summary,
    valid_task_id,
)
from skulk_core.ids import NodeId, new_command_id
from skulk_core.state.commands import SetTracing
from skulk_daemon.diagnostics.tracing import TraceStore
from skulk_daemon.errors import ApiError
from skulk_daemon.node import fanout
from skulk_daemon.node.node import Node

MAX_DELETE_IDS: Final = 256
_record = msgspec.json.Decoder(TraceRecord)


class TracingSwitch(msgspec.Struct, frozen=True, kw_only=True):
    enabled: bool


class DeleteTraces(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    task_ids: list[str] = msgspec.field(default_factory=list)


class TraceService:
    def __init__(self, node: Node, store: TraceStore) -> None:
        self._node = node
        self.store = store

    def enabled(self) -> TracingState:
        return TracingState(enabled=self._node.state.tracing_enabled)

    async def set_enabled(self, switch: TracingSwitch) -> TracingState:
        await self._node.submit(SetTracing(command_id=new_command_id(), enabled=switch.enabled))
        return self.enabled()

    # -- this node ------------------------------------------------------------------

    async def local_list(self) -> NodeTraces:
        records = await asyncio.to_thread(self.store.records)
        return NodeTraces(node_id=self._node.node_id, traces=[summary(r) for r in records])

    async def local(self, task_id: str) -> TraceRecord:
        _check(task_id)
        record = await asyncio.to_thread(self.store.get, task_id)
        if record is None:
            raise _not_found(task_id, "this node")
        return record

    def delete(self, request: DeleteTraces) -> DeletedTraces:
        if len(request.task_ids) > MAX_DELETE_IDS:
            raise ApiError(
                400, f"at most {MAX_DELETE_IDS} task ids per request", code="too_many_ids"
            )
        deleted, missing = self.store.delete(request.task_ids)
        return DeletedTraces(deleted=deleted, not_found=missing)

    # -- every member ---------------------------------------------------------------

    def _others(self) -> list[NodeId]:
        return [n for n in self._node.state.topology.nodes if n != self._node.node_id]

    async def cluster_list(self) -> ClusterTraces:
        local, answers = await asyncio.gather(
            self.local_list(), fanout.ask_all(self._node, self._others(), "GET", "/v1/traces")
        )
        by_task = {t.task_id: t for t in local.traces}
        unreachable: list[Unreachable] = []
        for answer in answers:
            if not answer.ok or not isinstance(answer.body, dict):
                unreachable.append(
                    Unreachable(node_id=answer.node_id, error=answer.error or "refused")
                )
                continue
            try:
                listed = msgspec.convert(answer.body, NodeTraces)
            except msgspec.ValidationError as exc:
                unreachable.append(
                    Unreachable(node_id=answer.node_id, error=f"a malformed answer: {exc}")
                )
                continue
            for trace in listed.traces:
                known = by_task.setdefault(trace.task_id, trace)
                by_task[trace.task_id] = msgspec.structs.replace(
                    known,
                    source_nodes=sorted({*known.source_nodes, *trace.source_nodes}),
                    model_id=known.model_id or trace.model_id,
                )
        traces = sorted(by_task.values(), key=lambda t: -t.started_at_us)
        return ClusterTraces(traces=traces, unreachable_nodes=unreachable)

    async def cluster(self, task_id: str) -> TraceRecord:
        _check(task_id)
        path = f"/v1/traces/{task_id}"
        local = await asyncio.to_thread(self.store.get, task_id)
        answers = await fanout.ask_all(self._node, self._others(), "GET", path)
        records = [] if local is None else [local]
        for answer in answers:
            if answer.ok:
                try:
                    records.append(_record.decode(msgspec.json.encode(answer.body)))
                except msgspec.DecodeError:
                    continue
        merged = merge(records)
        if merged is None:
            raise _not_found(task_id, "any reachable node")
        return merged


def _check(task_id: str) -> None:
    if not valid_task_id(task_id):
        raise ApiError(
            400,
            "a task id is 1-128 characters of letters, digits and . _ : -",
            code="invalid_task_id",
        )


def _not_found(task_id: str, where: str) -> ApiError:
    return ApiError(
        404,
        f"no trace of task {task_id} on {where}; GET /v1/traces lists them (tracing records "
        "only requests admitted while PUT /v1/tracing is on)",
        code="trace_not_found",
    )
