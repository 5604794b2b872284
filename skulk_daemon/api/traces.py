"""``/v1/tracing`` (the cluster-wide switch) and ``/v1/traces*`` (this node's trace
records, and every member's merged): structured, summarised, or as Chrome trace JSON
that Perfetto opens."""

from __future__ import annotations

from litestar import Controller, Response, get, post, put

from skulk_core.diagnostics.trace_answers import (
    ChromeTrace,
    ClusterTraces,
    DeletedTraces,
    NodeTraces,
    TraceStats,
    TracingState,
)
from skulk_core.diagnostics.traces import TraceRecord, chrome_trace, stats
from skulk_daemon.api.authority import declare
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.diagnostics.trace_service import (
    DeleteTraces,
    TraceService,
    TracingSwitch,
)

_READ_ERRORS = errors(OPENAI, 400, 404)


def _download(task_id: str, body: ChromeTrace) -> Response[ChromeTrace]:
    return Response(
        body, headers={"Content-Disposition": f'attachment; filename="trace-{task_id}.json"'}
    )


class TracesController(Controller):
    tags = ("Diagnostics",)
    opt = declare(Requirement.TRUSTED_FABRIC)

    @get("/v1/tracing", summary="Whether new requests are traced", responses=errors(OPENAI))
    async def tracing(self, traces: TraceService) -> TracingState:
        return traces.enabled()

    @put(
        "/v1/tracing",
        summary="Trace new requests cluster-wide, or stop",
        responses=errors(OPENAI, 400, 503),
    )
    async def set_tracing(self, traces: TraceService, data: TracingSwitch) -> TracingState:
        return await traces.set_enabled(data)

    @get("/v1/traces", summary="This node's trace records", responses=errors(OPENAI))
    async def local_list(self, traces: TraceService) -> NodeTraces:
        return await traces.local_list()

    @post(
        "/v1/traces/delete",
        status_code=200,
        summary="Delete this node's records of these tasks",
        responses=errors(OPENAI, 400),
    )
    async def delete(self, traces: TraceService, data: DeleteTraces) -> DeletedTraces:
        return traces.delete(data)

    @get(
        "/v1/traces/cluster",
        summary="Every member's trace records, by task",
        responses=errors(OPENAI),
    )
    async def cluster_list(self, traces: TraceService) -> ClusterTraces:
        return await traces.cluster_list()

    @get(
        "/v1/traces/cluster/{task_id:str}",
        summary="One task's spans from every member",
        responses=_READ_ERRORS,
    )
    async def cluster_record(self, traces: TraceService, task_id: str) -> TraceRecord:
        return await traces.cluster(task_id)

    @get(
        "/v1/traces/cluster/{task_id:str}/stats",
        summary="One task's timing summary across the cluster",
        responses=_READ_ERRORS,
    )
    async def cluster_stats(self, traces: TraceService, task_id: str) -> TraceStats:
        return stats(await traces.cluster(task_id))

    @get(
        "/v1/traces/cluster/{task_id:str}/raw",
        summary="One task's merged trace as Chrome trace JSON",
        responses=_READ_ERRORS,
    )
    async def cluster_raw(self, traces: TraceService, task_id: str) -> Response[ChromeTrace]:
        return _download(task_id, chrome_trace(await traces.cluster(task_id)))

    @get(
        "/v1/traces/{task_id:str}", summary="One task's spans on this node", responses=_READ_ERRORS
    )
    async def local_record(self, traces: TraceService, task_id: str) -> TraceRecord:
        return await traces.local(task_id)

    @get(
        "/v1/traces/{task_id:str}/stats",
        summary="One task's timing summary on this node",
        responses=_READ_ERRORS,
    )
    async def local_stats(self, traces: TraceService, task_id: str) -> TraceStats:
        return stats(await traces.local(task_id))

    @get(
        "/v1/traces/{task_id:str}/raw",
        summary="One task's trace on this node as Chrome trace JSON",
        responses=_READ_ERRORS,
    )
    async def local_raw(self, traces: TraceService, task_id: str) -> Response[ChromeTrace]:
        return _download(task_id, chrome_trace(await traces.local(task_id)))
