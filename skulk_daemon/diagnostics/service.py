"""The diagnostics service: this node's bundle, captures and cancels, and the
cluster-wide sweeps built from every member's bundle.

Routes stay thin: they hand the request's authority counters in and render what
comes back. Nothing here changes State; the only action is the cooperative cancel
of one task a local runner still runs.
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import msgspec
import psutil

from skulk_core.diagnostics.cluster import (
    cluster_version_status,
    merge_timeline,
    node_version_status,
)
from skulk_core.diagnostics.doctor import run_doctor
from skulk_core.ids import NodeId, RunnerId, TaskId
from skulk_core.version import SKULK_VERSION
from skulk_daemon.capabilities.service import CapabilityService
from skulk_daemon.diagnostics import facts, fanout
from skulk_daemon.diagnostics.engine_probe import engine_build
from skulk_daemon.diagnostics.performance import PerformanceEnvelopes
from skulk_daemon.diagnostics.processes import process_tree
from skulk_daemon.diagnostics.samples import sample_processes
from skulk_daemon.diagnostics.views import error_text, member_entry, placements, runner_view
from skulk_daemon.errors import ApiError
from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.node.node import Node
from skulk_daemon.system.buildinfo import source_commit
from skulk_daemon.worker.supervisor import ManagedRunner, Supervisor

MAX_SAMPLE_SECONDS: Final = 10.0
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
        cluster: ClusterAgent | None = None,
        capabilities: CapabilityService | None = None,
    ) -> None:
        self._node = node
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

    async def bundle(self, refusals: Mapping[str, int]) -> dict[str, Any]:
        """``GET /v1/diagnostics/node``: everything an operator asks first."""
        node = self._node
        cluster = None if self._cluster is None else self._cluster.diagnostics()
        engine = await engine_build()
        gathered = await asyncio.to_thread(
            facts.gather, node, self._worker, cluster, engine, self._ports()
        )
        runners = self._worker.runners() if self._worker is not None else []
        pids = self._worker.runner_pids() if self._worker is not None else {}
        tree = await asyncio.to_thread(process_tree, pids)
        return {
            "nodeId": node.node_id,
            "skulkVersion": SKULK_VERSION,
            "lastEventAppliedIdx": node.state.last_event_applied_idx,
            "runtime": self._runtime(),
            "config": self._config(),
            "resources": {
                "ramTotal": gathered.ram_total,
                "ramAvailable": gathered.ram_available,
                "swapTotal": gathered.swap_total,
                "swapFree": gathered.swap_free,
                "cpuCount": os.cpu_count(),
                "loadAverage": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                "modelsDir": gathered.models_dir,
                "modelsDiskTotal": gathered.disk_total,
                "modelsDiskFree": gathered.disk_free,
                "engine": {
                    "importable": engine.importable,
                    "systemInfo": engine.system_info,
                    "supportsRpc": engine.supports_rpc,
                },
            },
            "processes": tree,
            "supervisorRunners": [self._runner_view(r) for r in runners],
            "flightRecorder": (self._worker.flight.entries() if self._worker is not None else []),
            "placements": placements(node.state, node.last_master),
            "doctor": [msgspec.to_builtins(f) for f in run_doctor(gathered)],
            "cluster": cluster,
            "dataPlane": None if cluster is None else cluster.get("dataPlane"),
            "providers": (None if self._capabilities is None else self._capabilities.diagnostics()),
            # Changes this node made on the losing side of a partition, resubmitted
            # when it healed: each applied or refused with its reason.
            "partitionRecoveries": list(node.recovery.outcomes),
            # Requests the authority policy refused since start, by reason.
            "authorityRefusals": dict(sorted(refusals.items())),
        }

    def _runtime(self) -> dict[str, Any]:
        node = self._node
        return {
            "nodeId": node.node_id,
            "masterNodeId": node.last_master,
            "isMaster": node.is_master,
            "term": node.last_term,
            "skulkVersion": SKULK_VERSION,
            "skulkCommit": source_commit(),
            "pid": os.getpid(),
            "startedAt": datetime.fromtimestamp(_STARTED, UTC).isoformat(),
            "uptimeSeconds": round(time.time() - _STARTED, 1),
            "python": sys.version.split()[0],
            "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
            "now": datetime.now(UTC).isoformat(),
        }

    def _config(self) -> dict[str, Any]:
        node, config = self._node, self._node.config
        return {
            "apiHost": node.settings.host,
            "apiPort": node.settings.api_port,
            "fabricPort": None if self._cluster is None else self._cluster.transport.port,
            "operatorApiPort": node.settings.operator_api_port,
            "dataDir": str(node.settings.data_dir),
            "modelsDir": str(node.models_dir),
            "participation": config.node.participation.value,
            "mdns": config.cluster.mdns,
            "configuredPeers": len(config.cluster.peers),
            "apiKeysConfigured": bool(config.api.keys or os.environ.get("SKULK_API_KEYS")),
            "memoryReserveGb": config.node.memory_reserve_gb,
            "memoryLimitGb": config.node.memory_limit_gb,
        }

    def _ports(self) -> dict[str, int]:
        ports = {"api": self._node.settings.api_port}
        if self._cluster is not None:
            ports["fabric"] = self._cluster.transport.port
        return ports

    def _runner_view(self, runner: ManagedRunner) -> dict[str, Any]:
        status = self._node.state.runners.get(runner.runner_id)
        return runner_view(runner, status, time.monotonic() - runner.reported_since)

    async def capture(self, request: CaptureRequest) -> dict[str, Any]:
        """``POST /v1/diagnostics/node/capture``: a bounded snapshot, partial failures
        listed rather than failing the whole capture."""
        runner = self._find_runner(request.runner_id) if request.runner_id else None
        failures: list[dict[str, str]] = []
        captured: dict[str, Any] = {
            "nodeId": self._node.node_id,
            "capturedAt": datetime.now(UTC).isoformat(),
            "runtime": self._runtime(),
            "memory": _memory_facts(),
            "partialFailures": failures,
        }
        if runner is not None:
            captured["runner"] = self._runner_view(runner)
            entries = self._worker.flight.entries(runner.runner_id) if self._worker else []
            if request.task_id:
                entries = [e for e in entries if e.get("taskId") in (None, request.task_id)]
            captured["flightRecorder"] = entries
            captured["runnerProcessRecorder"] = (
                []
                if runner.process is None
                else [{"monotonic": t, "event": what} for t, what in runner.process.flight_record()]
            )
        if request.include_process_samples:
            seconds = min(max(request.sample_duration_seconds, 0.0), MAX_SAMPLE_SECONDS)
            pids = self._worker.runner_pids() if self._worker is not None else {}
            targets = [psutil.Process().pid, *pids]
            if runner is not None and runner.process is not None:
                targets = [runner.process.pid]
            samples, sample_failures = await asyncio.to_thread(sample_processes, targets, seconds)
            captured["processSamples"] = samples
            failures.extend(sample_failures)
        return captured

    def cancel(self, runner_id: str, request: CancelRequest) -> dict[str, Any]:
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
        return {"runnerId": runner_id, "taskId": asked, "cancelRequested": True}

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

    def telemetry(self) -> dict[str, Any]:
        """``GET /v1/diagnostics/telemetry``: the telemetry transport's aggregates."""
        if self._cluster is None:
            return {"nodeId": self._node.node_id, "fabric": False}
        return {
            "nodeId": self._node.node_id,
            "fabric": True,
            **self._cluster.telemetry_stats.report(),
        }

    # -- performance envelopes ------------------------------------------------------

    def performance_envelopes(self) -> dict[str, Any]:
        """``GET /v1/diagnostics/performance-envelopes``: this node's curves."""
        return self.performance.report()

    async def cluster_performance_envelopes(self) -> dict[str, Any]:
        """Every member's envelopes; unreachable members as explicit failures."""
        return await self.performance.cluster_report(self._members())

    # -- the cluster ----------------------------------------------------------------

    def _members(self) -> list[NodeId]:
        members = list(self._node.state.topology.nodes)
        if self._node.node_id not in members:
            members.insert(0, self._node.node_id)
        return members

    async def _bundles(self, refusals: Mapping[str, int]) -> list[tuple[NodeId, Any]]:
        """(node id, bundle or PeerAnswer) for every member, this node's own local."""
        others = [n for n in self._members() if n != self._node.node_id]
        local, answers = await asyncio.gather(
            self.bundle(refusals),
            fanout.ask_all(self._node, others, "GET", "/v1/diagnostics/node"),
        )
        return [(self._node.node_id, local), *((a.node_id, a) for a in answers)]

    async def cluster(self, refusals: Mapping[str, int]) -> dict[str, Any]:
        """``GET /v1/diagnostics/cluster``: every member, unreachable ones as ok false."""
        nodes = []
        for node_id, got in await self._bundles(refusals):
            nodes.append(self._entry(node_id, got))
        statuses = [node_version_status(SKULK_VERSION, n.get("skulkVersion")) for n in nodes]
        for entry, status in zip(nodes, statuses, strict=True):
            entry["versionStatus"] = status.value
        return {
            "nodeId": self._node.node_id,
            "versionStatus": cluster_version_status(statuses).value,
            "nodes": nodes,
        }

    def _entry(self, node_id: NodeId, got: Any) -> dict[str, Any]:
        return member_entry(node_id, got, self._telemetry_version(node_id))

    def _telemetry_version(self, node_id: NodeId) -> str | None:
        reading = self._node.view().telemetry.get(node_id)
        return None if reading is None else reading.identity.skulk_version

    async def timeline(self, refusals: Mapping[str, int]) -> dict[str, Any]:
        """``GET /v1/diagnostics/cluster/timeline``: every rank's recorder, merged."""
        bundles: dict[str, Any] = {}
        unreachable: list[dict[str, Any]] = []
        for node_id, got in await self._bundles(refusals):
            entry = self._entry(node_id, got)
            if entry["ok"]:
                bundles[node_id] = entry["bundle"]
            else:
                unreachable.append({"nodeId": node_id, "error": entry["error"]})
        return {"nodeId": self._node.node_id, **merge_timeline(bundles, unreachable)}

    async def peer(self, node_id: str, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """Proxy one diagnostics request to ``node_id``: its answer, or its refusal as
        ours (404 if not a member, 502 if no advertised route answers)."""
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
        answer = await fanout.ask(
            self._node, NodeId(node_id), method, path, body=body, budget_seconds=budget
        )
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
        return answer.body


def _memory_facts() -> dict[str, Any]:
    ram, swap = psutil.virtual_memory(), psutil.swap_memory()
    me = psutil.Process()
    return {
        "ramTotal": ram.total,
        "ramAvailable": ram.available,
        "swapTotal": swap.total,
        "swapUsed": swap.used,
        "daemonRssBytes": me.memory_info().rss,
    }
