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

from skulk_core.chat.generation import EngineChunk, FinishChunk
from skulk_core.diagnostics.cluster import (
    cluster_version_status,
    merge_timeline,
    node_version_status,
)
from skulk_core.diagnostics.doctor import run_doctor
from skulk_core.diagnostics.envelopes import EnvelopeKey, Envelopes, Sample
from skulk_core.ids import ModelId, NodeId, RunnerId, TaskId
from skulk_core.state.shards import serving_node
from skulk_core.version import SKULK_VERSION
from skulk_daemon.diagnostics import facts
from skulk_daemon.diagnostics.engine_probe import engine_build
from skulk_daemon.diagnostics.processes import process_tree
from skulk_daemon.diagnostics.samples import sample_processes
from skulk_daemon.diagnostics.sources import FabricSource, ProviderSource
from skulk_daemon.errors import ApiError
from skulk_daemon.node import fanout
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
        cluster: FabricSource | None = None,
        capabilities: ProviderSource | None = None,
    ) -> None:
        self._node = node
        self._worker = worker
        self._cluster = cluster
        self._capabilities = capabilities
        self.envelopes = Envelopes()
        if worker is not None:
            worker.generation_listeners.append(self._observe)

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
            "placements": self._placements(),
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
        since = time.monotonic() - runner.reported_since
        return {
            "runnerId": runner.runner_id,
            "instanceId": runner.instance_id,
            "modelId": runner.model_id,
            "statusKind": None if status is None else type(status).__name__,
            "phase": runner.reported,
            "secondsInPhase": round(since, 3),
            "phaseBudgetSeconds": facts.phase_budget(runner.reported),
            "supervisorPhase": runner.phase.value,
            "deviceRank": runner.device_rank,
            "worldSize": runner.world_size,
            "rpcDonor": runner.donor,
            "activeTasks": runner.active_tasks,
            "taskIds": sorted(runner.tasks),
            "pid": None if runner.process is None else runner.process.pid,
            "failure": runner.failure,
        }

    def _placements(self) -> list[dict[str, Any]]:
        state, master = self._node.state, self._node.last_master
        placements = []
        for instance_id, instance in sorted(state.instances.items()):
            assignments = instance.shard_assignments
            nodes = sorted(assignments.node_to_runner)
            placements.append(
                {
                    "instanceId": instance_id,
                    "modelId": assignments.model_id,
                    "kind": type(instance).__name__,
                    "nodes": nodes,
                    "servingNodeId": serving_node(instance),
                    "masterNodeId": master,
                    "masterInPlacement": master in nodes,
                    "runners": [
                        {
                            "runnerId": runner_id,
                            "nodeId": node_id,
                            "deviceRank": assignments.runner_to_shard[runner_id].device_rank,
                            "statusKind": _status_kind(state.runners.get(runner_id)),
                        }
                        for node_id, runner_id in sorted(assignments.node_to_runner.items())
                        if runner_id in assignments.runner_to_shard
                    ],
                }
            )
        return placements

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

    def _observe(self, model_id: ModelId, chunk: EngineChunk, served: str) -> None:
        if served != "local" or not isinstance(chunk, FinishChunk):
            return
        stats = chunk.stats
        self.envelopes.add(
            self._envelope_key(model_id),
            Sample(
                concurrency=stats.in_flight_at_admission,
                ttft_ms=stats.time_to_first_token_ms,
                decode_tps=stats.generation_tps,
            ),
        )

    def _envelope_key(self, model_id: ModelId) -> EnvelopeKey:
        reading = self._node.own_telemetry()
        hardware, backend = "unknown", "cpu"
        if reading is not None:
            accelerator = reading.system.accelerator
            hardware = (
                f"{accelerator.vendor} {accelerator.name} x{accelerator.count}"
                if accelerator is not None
                else f"cpu {reading.system.cpu_model} x{reading.system.cpu_count}"
            )
            backend = reading.resources.backends[0] if reading.resources.backends else backend
        entry = self._node.catalog().get(model_id)
        quantization = (entry.card.quantization if entry is not None else None) or "unknown"
        return EnvelopeKey(hardware, model_id, f"llama.cpp/{backend}", quantization)

    def performance_envelopes(self) -> dict[str, Any]:
        """``GET /v1/diagnostics/performance-envelopes``: this node's curves."""
        return {"nodeId": self._node.node_id, "envelopes": self.envelopes.report()}

    async def cluster_performance_envelopes(self) -> dict[str, Any]:
        """Every member's envelopes; unreachable members as explicit failures."""
        others = [n for n in self._members() if n != self._node.node_id]
        path = "/v1/diagnostics/performance-envelopes"
        answers = await fanout.ask_all(self._node, others, "GET", path)
        nodes: list[dict[str, Any]] = [{"ok": True, **self.performance_envelopes()}]
        for answer in answers:
            if answer.ok and isinstance(answer.body, dict):
                nodes.append({"ok": True, **answer.body, "nodeId": answer.node_id})
            else:
                error = answer.error or _error_text(answer.status, answer.body)
                nodes.append({"nodeId": answer.node_id, "ok": False, "error": error})
        return {"nodes": nodes}

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
        if isinstance(got, fanout.PeerAnswer):
            if got.ok and isinstance(got.body, dict):
                return {
                    "nodeId": node_id,
                    "ok": True,
                    "url": got.url,
                    "skulkVersion": got.body.get("skulkVersion"),
                    "bundle": got.body,
                }
            return {
                "nodeId": node_id,
                "ok": False,
                "skulkVersion": self._telemetry_version(node_id),
                "error": got.error or _error_text(got.status, got.body),
            }
        return {"nodeId": node_id, "ok": True, "skulkVersion": SKULK_VERSION, "bundle": got}

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
                f"node {node_id}: {_error_text(answer.status, answer.body)}",
                code=str(code or "peer_error"),
            )
        return answer.body


def _status_kind(status: object) -> str | None:
    return None if status is None else type(status).__name__


def _error_text(status: int | None, body: Any) -> str:
    message = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
    return f"HTTP {status}: {message or 'no message'}"


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
