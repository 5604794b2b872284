"""The tracing service behind ``/v1/tracing`` and ``/v1/traces*``: the cluster-wide
switch (ordered through State) and reads of this node's or every member's records."""

from __future__ import annotations

import asyncio
from typing import Any, Final

import msgspec

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

    def enabled(self) -> dict[str, bool]:
        return {"enabled": self._node.state.tracing_enabled}

    async def set_enabled(self, switch: TracingSwitch) -> dict[str, bool]:
        await self._node.submit(SetTracing(command_id=new_command_id(), enabled=switch.enabled))
        return self.enabled()

    # -- this node ------------------------------------------------------------------

    async def local_list(self) -> dict[str, Any]:
        records = await asyncio.to_thread(self.store.records)
        return {"nodeId": self._node.node_id, "traces": [summary(r) for r in records]}

    async def local(self, task_id: str) -> TraceRecord:
        _check(task_id)
        record = await asyncio.to_thread(self.store.get, task_id)
        if record is None:
            raise _not_found(task_id, "this node")
        return record

    def delete(self, request: DeleteTraces) -> dict[str, list[str]]:
        if len(request.task_ids) > MAX_DELETE_IDS:
            raise ApiError(
                400, f"at most {MAX_DELETE_IDS} task ids per request", code="too_many_ids"
            )
        deleted, missing = self.store.delete(request.task_ids)
        return {"deleted": deleted, "notFound": missing}

    # -- every member ---------------------------------------------------------------

    def _others(self) -> list[NodeId]:
        return [n for n in self._node.state.topology.nodes if n != self._node.node_id]

    async def cluster_list(self) -> dict[str, Any]:
        local, answers = await asyncio.gather(
            self.local_list(), fanout.ask_all(self._node, self._others(), "GET", "/v1/traces")
        )
        by_task: dict[str, dict[str, Any]] = {t["taskId"]: t for t in local["traces"]}
        unreachable: list[dict[str, Any]] = []
        for answer in answers:
            if not answer.ok or not isinstance(answer.body, dict):
                unreachable.append({"nodeId": answer.node_id, "error": answer.error or "refused"})
                continue
            for trace in answer.body.get("traces", []):
                if not isinstance(trace, dict) or not isinstance(trace.get("taskId"), str):
                    continue
                known = by_task.setdefault(trace["taskId"], trace)
                nodes = {*known.get("sourceNodes", []), *trace.get("sourceNodes", [])}
                known["sourceNodes"] = sorted(str(n) for n in nodes)
                if not known.get("modelId"):
                    known["modelId"] = trace.get("modelId", "")
        traces = sorted(by_task.values(), key=lambda t: -int(t.get("startedAtUs", 0)))
        return {"traces": traces, "unreachableNodes": unreachable}

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
