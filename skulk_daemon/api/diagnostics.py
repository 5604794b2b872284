"""``/v1/diagnostics/*``: this node's bundle, doctor, captures and cancels, and the
cluster-wide sweeps (every member's bundle, the merged runner timeline).

Handlers are thin: :class:`~skulk_daemon.diagnostics.service.DiagnosticsService` does
the work. Everything here is for operators, so it takes trusted-fabric authority
(this machine, the LAN, or the operator gateway); the only action, a cooperative
task cancel, is the same requirement.
"""

from __future__ import annotations

import msgspec
from litestar import Controller, get, post

from skulk_core.diagnostics.answers import (
    CancelAnswer,
    Capture,
    ClusterBundles,
    ClusterEnvelopes,
    NodeEnvelopes,
    TelemetryReport,
    Timeline,
)
from skulk_core.diagnostics.bundle import NodeBundle
from skulk_daemon.api.authority import AuthorityGuard, declare
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.diagnostics.service import CancelRequest, CaptureRequest, DiagnosticsService

_PROXY_STATUSES = (400, 404, 502)


class DiagnosticsController(Controller):
    path = "/v1/diagnostics"
    tags = ("Diagnostics",)
    opt = declare(Requirement.TRUSTED_FABRIC)

    @get(
        "/node",
        summary="This node's diagnostics bundle: runtime, resources, runners, doctor",
        responses=errors(OPENAI),
    )
    async def node_bundle(
        self, diagnostics: DiagnosticsService, authority_guard: AuthorityGuard
    ) -> NodeBundle:
        return await diagnostics.bundle(authority_guard.refusals)

    @post(
        "/node/capture",
        status_code=200,
        summary="Capture a bounded snapshot of one runner (or the node), with samples",
        responses=errors(OPENAI, 400, 404),
    )
    async def capture(self, diagnostics: DiagnosticsService, data: CaptureRequest) -> Capture:
        return await diagnostics.capture(data)

    @post(
        "/node/runners/{runner_id:str}/cancel",
        status_code=200,
        summary="Ask a local runner to cancel one task, cooperatively",
        responses=errors(OPENAI, 400, 404),
    )
    async def cancel(
        self, diagnostics: DiagnosticsService, runner_id: str, data: CancelRequest
    ) -> CancelAnswer:
        return diagnostics.cancel(runner_id, data)

    @get(
        "/telemetry",
        summary="This node's telemetry transport: capacities, depth, publishes, failures",
        responses=errors(OPENAI),
    )
    async def telemetry(self, diagnostics: DiagnosticsService) -> TelemetryReport:
        return diagnostics.telemetry()

    @get(
        "/performance-envelopes",
        summary="This node's throughput and latency against concurrency, per model",
        responses=errors(OPENAI),
    )
    async def performance_envelopes(self, diagnostics: DiagnosticsService) -> NodeEnvelopes:
        return diagnostics.performance_envelopes()

    @get(
        "/performance-envelopes/cluster",
        summary="Every member's performance envelopes; unreachable ones as failures",
        responses=errors(OPENAI),
    )
    async def cluster_performance_envelopes(
        self, diagnostics: DiagnosticsService
    ) -> ClusterEnvelopes:
        return await diagnostics.cluster_performance_envelopes()

    @get(
        "/cluster",
        summary="Every member's bundle; unreachable members as ok false",
        responses=errors(OPENAI),
    )
    async def cluster(
        self, diagnostics: DiagnosticsService, authority_guard: AuthorityGuard
    ) -> ClusterBundles:
        return await diagnostics.cluster(authority_guard.refusals)

    @get(
        "/cluster/timeline",
        summary="Every rank's runner flight recorder, merged by time",
        responses=errors(OPENAI),
    )
    async def timeline(
        self, diagnostics: DiagnosticsService, authority_guard: AuthorityGuard
    ) -> Timeline:
        return await diagnostics.timeline(authority_guard.refusals)

    @get(
        "/cluster/{node_id:str}",
        summary="One member's bundle (this node's own when it is the one named)",
        responses=errors(OPENAI, *_PROXY_STATUSES),
    )
    async def peer_bundle(
        self, diagnostics: DiagnosticsService, authority_guard: AuthorityGuard, node_id: str
    ) -> NodeBundle:
        if node_id == diagnostics.node_id:
            return await diagnostics.bundle(authority_guard.refusals)
        return await diagnostics.peer(node_id, "GET", "/v1/diagnostics/node", into=NodeBundle)

    @post(
        "/cluster/{node_id:str}/capture",
        status_code=200,
        summary="Capture on one member",
        responses=errors(OPENAI, *_PROXY_STATUSES),
    )
    async def peer_capture(
        self, diagnostics: DiagnosticsService, node_id: str, data: CaptureRequest
    ) -> Capture:
        if node_id == diagnostics.node_id:
            return await diagnostics.capture(data)
        path = "/v1/diagnostics/node/capture"
        return await diagnostics.peer(node_id, "POST", path, _wire(data), into=Capture)

    @post(
        "/cluster/{node_id:str}/runners/{runner_id:str}/cancel",
        status_code=200,
        summary="Cancel one task on one member's runner",
        responses=errors(OPENAI, *_PROXY_STATUSES),
    )
    async def peer_cancel(
        self,
        diagnostics: DiagnosticsService,
        node_id: str,
        runner_id: str,
        data: CancelRequest,
    ) -> CancelAnswer:
        if node_id == diagnostics.node_id:
            return diagnostics.cancel(runner_id, data)
        path = f"/v1/diagnostics/node/runners/{runner_id}/cancel"
        return await diagnostics.peer(node_id, "POST", path, _wire(data), into=CancelAnswer)


def _wire(data: CaptureRequest | CancelRequest) -> object:
    return msgspec.to_builtins(data)
