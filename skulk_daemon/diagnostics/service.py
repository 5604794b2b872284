"""The diagnostics service: this node's bundle, captures and cancels, and the
cluster-wide sweeps built from every member's bundle.

Routes stay thin: they hand the request's authority counters in and render what
comes back. Nothing here changes State; the only action is the cooperative cancel
of one task a local runner still runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final, TypeVar

import msgspec
import psutil

from skulk_core.cluster.remote_access import TailscaleStatus
from skulk_core.diagnostics.answers import (
    UNSET,
    CancelAnswer,
    Capture,
    ClusterBundles,
    ClusterEnvelopes,
    MemberBundle,
    MemoryFacts,
    NodeEnvelopes,
    PartialFailure,
    ProcessEvent,
    TelemetryReport,
    Timeline,
    TimelineSource,
    Unreachable,
)
from skulk_core.diagnostics.bundle import (
    ConfigFacts,
    EngineFacts,
    FabricDiagnostics,
    NodeBundle,
    ProviderCounters,
    RecoveryOutcome,
    Resources,
    RunnerView,
    Runtime,
)
from skulk_core.diagnostics.cluster import (
    cluster_version_status,
    merge_timeline,
    node_version_status,
)
from skulk_core.diagnostics.doctor import run_doctor
from skulk_core.diagnostics.fabric_document import FabricView
from skulk_core.ids import NodeId, RunnerId, TaskId
from skulk_core.version import SKULK_VERSION
from skulk_daemon.diagnostics import facts
from skulk_daemon.diagnostics.engine_probe import engine_build
from skulk_daemon.diagnostics.performance import PerformanceEnvelopes
from skulk_daemon.diagnostics.processes import process_tree
from skulk_daemon.diagnostics.samples import sample_processes
from skulk_daemon.diagnostics.sources import FabricSource, ProviderSource
from skulk_daemon.diagnostics.views import decoded, error_text, placements, runner_view
from skulk_daemon.errors import ApiError
from skulk_daemon.node import fanout
from skulk_daemon.node.node import Node
from skulk_daemon.node_admin.tailscale import TailscaleProbe
from skulk_daemon.system.buildinfo import source_commit
from skulk_daemon.worker.supervisor import ManagedRunner, Supervisor

log = logging.getLogger(__name__)
MAX_SAMPLE_SECONDS: Final = 10.0
T = TypeVar("T")

_STARTED = time.time()


class CaptureRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    runner_id: str | None = None
    task_id: str | None = None
    include_process_samples: bool = False
    sample_duration_seconds: float = 1.0


class CancelRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    task_id: str | None = None


class DiagnosticsService:
    def __init__(
        self,
        node: Node,
        worker: Supervisor | None,
        *,
        cluster: FabricSource | None = None,
        capabilities: ProviderSource | None = None,
        tailscale: TailscaleProbe | None = None,
    ) -> None:
        self._node = node
        self._tailscale = tailscale or TailscaleProbe()
        self._worker = worker
        self._cluster = cluster
        self._capabilities = capabilities
        self.performance = PerformanceEnvelopes(node)
        if worker is not None:
            worker.generation_listeners.append(self.performance.observe)

    @property
    def node_id(self) -> NodeId:
        return self._node.node_id

    # -- this node ------------------------------------------------------------------

    async def bundle(self, refusals: Mapping[str, int]) -> NodeBundle:
        """``GET /v1/diagnostics/node``: everything an operator asks first."""
        node = self._node
        cluster = None if self._cluster is None else _fabric(self._cluster.diagnostics())
        engine = await engine_build()
        gathered = await asyncio.to_thread(
            facts.gather, node, self._worker, cluster, engine, self._ports()
        )
        runners = self._worker.runners() if self._worker is not None else []
        pids = self._worker.runner_pids() if self._worker is not None else {}
        tree = await asyncio.to_thread(process_tree, pids)
        return NodeBundle(
            node_id=node.node_id,
            skulk_version=SKULK_VERSION,
            last_event_applied_idx=node.state.last_event_applied_idx,
            runtime=self._runtime(),
            config=self._config(),
            resources=Resources(
                ram_total=gathered.ram_total,
                ram_available=gathered.ram_available,
                swap_total=gathered.swap_total,
                swap_free=gathered.swap_free,
                cpu_count=os.cpu_count(),
                load_average=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                models_dir=gathered.models_dir,
                models_disk_total=gathered.disk_total,
                models_disk_free=gathered.disk_free,
                engine=EngineFacts(
                    importable=engine.importable,
                    system_info=engine.system_info,
                    supports_rpc=engine.supports_rpc,
                ),
            ),
            processes=tree,
            supervisor_runners=[self._runner_view(r) for r in runners],
            flight_recorder=self._worker.flight.entries() if self._worker is not None else [],
            placements=placements(node.state, node.last_master),
            doctor=run_doctor(gathered),
            cluster=cluster,
            data_plane=None if cluster is None else cluster.data_plane,
            providers=(
                None
                if self._capabilities is None
                else msgspec.convert(self._capabilities.diagnostics(), ProviderCounters)
            ),
            partition_recoveries=msgspec.convert(
                list(node.recovery.outcomes), list[RecoveryOutcome]
            ),
            authority_refusals=dict(sorted(refusals.items())),
            tailscale=await self._tailscale_status(),
        )

    async def _tailscale_status(self) -> TailscaleStatus | None:
        """This node's tailnet identity; None only for a probe that broke unexpectedly
        (a missing or stopped tailscale is an honest ``running: false``)."""
        try:
            return await self._tailscale.status()
        except Exception:
            log.exception("the tailscale probe failed")
            return None

    def _runtime(self) -> Runtime:
        node = self._node
        return Runtime(
            node_id=node.node_id,
            master_node_id=node.last_master,
            is_master=node.is_master,
            term=node.last_term,
            skulk_version=SKULK_VERSION,
            skulk_commit=source_commit(),
            pid=os.getpid(),
            started_at=datetime.fromtimestamp(_STARTED, UTC).isoformat(),
            uptime_seconds=round(time.time() - _STARTED, 1),
            python=sys.version.split()[0],
            platform=f"{platform.system()} {platform.release()} {platform.machine()}",
            now=datetime.now(UTC).isoformat(),
        )

    def _config(self) -> ConfigFacts:
        node, config = self._node, self._node.config
        return ConfigFacts(
            api_host=node.settings.host,
            api_port=node.settings.api_port,
            fabric_port=None if self._cluster is None else self._cluster.transport.port,
            operator_api_port=node.settings.operator_api_port,
            data_dir=str(node.settings.data_dir),
            models_dir=str(node.models_dir),
            participation=config.node.participation.value,
            mdns=config.cluster.mdns,
            configured_peers=len(config.cluster.peers),
            api_keys_configured=bool(config.api.keys or os.environ.get("SKULK_API_KEYS")),
            memory_reserve_gb=config.node.memory_reserve_gb,
            memory_limit_gb=config.node.memory_limit_gb,
        )

    def _ports(self) -> dict[str, int]:
        ports = {"api": self._node.settings.api_port}
        if self._cluster is not None:
            ports["fabric"] = self._cluster.transport.port
        return ports

    def _runner_view(self, runner: ManagedRunner) -> RunnerView:
        status = self._node.state.runners.get(runner.runner_id)
        return runner_view(runner, status, time.monotonic() - runner.reported_since)

    async def capture(self, request: CaptureRequest) -> Capture:
        """``POST /v1/diagnostics/node/capture``: a bounded snapshot, partial failures
        listed rather than failing the whole capture."""
        runner = self._find_runner(request.runner_id) if request.runner_id else None
        failures: list[PartialFailure] = []
        captured = Capture(
            node_id=self._node.node_id,
            captured_at=datetime.now(UTC).isoformat(),
            runtime=self._runtime(),
            memory=_memory_facts(),
            partial_failures=failures,
        )
        if runner is not None:
            entries = self._worker.flight.entries(runner.runner_id) if self._worker else []
            if request.task_id:
                entries = [e for e in entries if e.task_id in (None, request.task_id)]
            captured = msgspec.structs.replace(
                captured,
                runner=self._runner_view(runner),
                flight_recorder=entries,
                runner_process_recorder=(
                    []
                    if runner.process is None
                    else [
                        ProcessEvent(monotonic=t, event=what)
                        for t, what in runner.process.flight_record()
                    ]
                ),
            )
        if request.include_process_samples:
            seconds = min(max(request.sample_duration_seconds, 0.0), MAX_SAMPLE_SECONDS)
            pids = self._worker.runner_pids() if self._worker is not None else {}
            targets = [psutil.Process().pid, *pids]
            if runner is not None and runner.process is not None:
                targets = [runner.process.pid]
            samples, sample_failures = await asyncio.to_thread(sample_processes, targets, seconds)
            captured = msgspec.structs.replace(captured, process_samples=samples)
            failures.extend(sample_failures)
        return captured

    def cancel(self, runner_id: str, request: CancelRequest) -> CancelAnswer:
        """``POST /v1/diagnostics/node/runners/{id}/cancel``: one cooperative cancel."""
        runner = self._find_runner(runner_id)
        assert self._worker is not None  # _find_runner found one
        task = TaskId(request.task_id) if request.task_id else None
        asked = self._worker.cancel_runner_task(runner.runner_id, task)
        if asked is None:
            which = f"task {request.task_id}" if request.task_id else "a single running task"
            raise ApiError(
                404,
                f"runner {runner_id} has no {which} to cancel; list its tasks with "
                "GET /v1/diagnostics/node (supervisorRunners[].taskIds)",
                code="task_not_found",
            )
        return CancelAnswer(runner_id=runner_id, task_id=asked, cancel_requested=True)

    def _find_runner(self, runner_id: str | None) -> ManagedRunner:
        runners = {r.runner_id: r for r in (self._worker.runners() if self._worker else [])}
        runner = runners.get(RunnerId(runner_id or ""))
        if runner is None:
            raise ApiError(
                404,
                f"this node's supervisor has no runner {runner_id!r}; "
                "GET /v1/diagnostics/node lists its runners",
                code="runner_not_found",
            )
        return runner

    def telemetry(self) -> TelemetryReport:
        """``GET /v1/diagnostics/telemetry``: the telemetry transport's aggregates."""
        if self._cluster is None:
            return TelemetryReport(node_id=self._node.node_id, fabric=False)
        report = self._cluster.telemetry_stats.report()
        return msgspec.convert(
            {**report, "nodeId": self._node.node_id, "fabric": True}, TelemetryReport
        )

    # -- performance envelopes ------------------------------------------------------

    def performance_envelopes(self) -> NodeEnvelopes:
        """``GET /v1/diagnostics/performance-envelopes``: this node's curves."""
        return self.performance.report()

    async def cluster_performance_envelopes(self) -> ClusterEnvelopes:
        """Every member's envelopes; unreachable members (or a malformed answer) as
        explicit failures."""
        return await self.performance.cluster_report(self._members())

    def _members(self) -> list[NodeId]:
        members = list(self._node.state.topology.nodes)
        if self._node.node_id not in members:
            members.insert(0, self._node.node_id)
        return members

    async def _bundles(
        self, refusals: Mapping[str, int]
    ) -> tuple[NodeBundle, list[fanout.PeerAnswer]]:
        """This node's own bundle, and every other member's answer."""
        others = [n for n in self._members() if n != self._node.node_id]
        return await asyncio.gather(
            self.bundle(refusals),
            fanout.ask_all(self._node, others, "GET", "/v1/diagnostics/node"),
        )

    async def cluster(self, refusals: Mapping[str, int]) -> ClusterBundles:
        """``GET /v1/diagnostics/cluster``: every member, unreachable ones (or ones whose
        bundle is malformed) as ok false."""
        local, answers = await self._bundles(refusals)
        found: list[tuple[NodeId, str | None, NodeBundle | str, str | None]] = [
            (self._node.node_id, SKULK_VERSION, local, None)
        ]
        for answer in answers:
            got = decoded(answer, NodeBundle)
            version = (
                got.skulk_version
                if isinstance(got, NodeBundle)
                else self._telemetry_version(answer.node_id)
            )
            found.append((answer.node_id, version, got, answer.url))
        statuses = [node_version_status(SKULK_VERSION, version) for _, version, _, _ in found]
        nodes = [
            MemberBundle(
                node_id=node_id,
                ok=True,
                skulk_version=version,
                version_status=status.value,
                bundle=got,
                url=UNSET if node_id == self._node.node_id or url is None else url,
            )
            if isinstance(got, NodeBundle)
            else MemberBundle(
                node_id=node_id,
                ok=False,
                skulk_version=version,
                version_status=status.value,
                error=got,
            )
            for (node_id, version, got, url), status in zip(found, statuses, strict=True)
        ]
        return ClusterBundles(
            node_id=self._node.node_id,
            version_status=cluster_version_status(statuses).value,
            nodes=nodes,
        )

    def _telemetry_version(self, node_id: NodeId) -> str | None:
        reading = self._node.view().telemetry.get(node_id)
        return None if reading is None else reading.identity.skulk_version

    async def timeline(self, refusals: Mapping[str, int]) -> Timeline:
        """``GET /v1/diagnostics/cluster/timeline``: every rank's recorder, merged."""
        local, answers = await self._bundles(refusals)
        sources: dict[str, TimelineSource] = {
            self._node.node_id: TimelineSource(
                supervisor_runners=local.supervisor_runners,
                flight_recorder=local.flight_recorder,
            )
        }
        unreachable: list[Unreachable] = []
        for answer in answers:
            got = decoded(answer, TimelineSource)
            if isinstance(got, TimelineSource):
                sources[answer.node_id] = got
            else:
                unreachable.append(Unreachable(node_id=answer.node_id, error=got))
        return merge_timeline(self._node.node_id, sources, unreachable)

    async def peer(
        self, node_id: str, method: str, path: str, body: object = None, *, into: type[T]
    ) -> T:
        """Proxy one diagnostics request to ``node_id``: its answer decoded ``into``
        the wire type, or its refusal as ours (404 if not a member, 502 if no advertised
        route answers or what it answers is malformed)."""
        if NodeId(node_id) not in self._members():
            raise ApiError(
                404,
                f"{node_id!r} is not a member of this cluster; GET /v1/diagnostics/cluster "
                "lists the members",
                code="node_not_found",
            )
        budget = (
            fanout.CAPTURE_TIMEOUT_SECONDS if method == "POST" else fanout.PROBE_TIMEOUT_SECONDS
        )
        try:
            answer = await fanout.ask(
                self._node, NodeId(node_id), method, path, body=body, budget_seconds=budget
            )
        except fanout.UnsafePath as exc:
            raise ApiError(400, str(exc), code="invalid_id") from None
        if answer.status is None:
            raise ApiError(502, f"node {node_id}: {answer.error}", code="node_unreachable")
        if answer.status != 200 or not isinstance(answer.body, dict):
            error = answer.body.get("error") if isinstance(answer.body, dict) else None
            code = error.get("code") if isinstance(error, dict) else None
            status = answer.status if 400 <= answer.status < 500 else 502
            raise ApiError(
                status,
                f"node {node_id}: {error_text(answer.status, answer.body)}",
                code=str(code or "peer_error"),
            )
        try:
            return msgspec.convert(answer.body, into)
        except msgspec.ValidationError as exc:
            raise ApiError(
                502, f"node {node_id} answered a malformed {path}: {exc}", code="peer_malformed"
            ) from None


def _fabric(diagnostics: FabricView) -> FabricDiagnostics:
    return msgspec.convert(diagnostics, FabricDiagnostics)


def _memory_facts() -> MemoryFacts:
    ram, swap = psutil.virtual_memory(), psutil.swap_memory()
    me = psutil.Process()
    return MemoryFacts(
        ram_total=ram.total,
        ram_available=ram.available,
        swap_total=swap.total,
        swap_used=swap.used,
        daemon_rss_bytes=me.memory_info().rss,
    )
