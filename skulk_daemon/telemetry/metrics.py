"""``GET /metrics``: this node in Prometheus's text format.

Each node keeps its own registry (not prometheus_client's global one: several
nodes may live in one process in tests). Request counters and latencies are kept
by :class:`MetricsMiddleware` per route template; generation histograms are fed by
the supervisor as each generation ends; everything else (runners, tasks, the
fabric, the event log, refusals) is read from live objects at scrape time by a
collector, so a scrape is always current and costs nothing between scrapes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import psutil
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from skulk_core.chat.generation import EngineChunk, ErrorChunk, FinishChunk
from skulk_core.diagnostics.fabric_document import FabricView
from skulk_core.ids import ModelId
from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.node.node import Node
from skulk_daemon.worker.supervisor import Supervisor

LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TTFT_BUCKETS: Final = (0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30)
RATE_BUCKETS: Final = (1, 2, 5, 10, 20, 35, 50, 75, 100, 150, 200, 350, 500, 1000)
_UNMATCHED: Final = "unmatched"


class NodeMetrics:
    def __init__(self, node: Node, worker: Supervisor | None, cluster: ClusterAgent | None) -> None:
        self.registry = CollectorRegistry()
        self.refusals: Mapping[str, int] = {}
        self.requests = Counter(
            "skulk_http_requests",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "skulk_http_request_duration_seconds",
            "Time to answer an HTTP request (streams: until the last byte)",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.ttft = Histogram(
            "skulk_time_to_first_token_seconds",
            "Time from admission to the first sampled token, per model",
            ["model", "served"],
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.decode_rate = Histogram(
            "skulk_decode_tokens_per_second",
            "Decode rate of each finished generation, per model",
            ["model", "served"],
            buckets=RATE_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            "skulk_tokens",
            "Tokens processed, per model and kind (prompt, cached, completion)",
            ["model", "kind"],
            registry=self.registry,
        )
        self.generations = Counter(
            "skulk_generations",
            "Generations ended, per model and outcome (a finish reason or an error code)",
            ["model", "outcome"],
            registry=self.registry,
        )
        self.registry.register(_LiveCollector(node, worker, cluster, lambda: self.refusals))
        if worker is not None:
            worker.generation_listeners.append(self.generation_ended)

    def generation_ended(self, model_id: ModelId, chunk: EngineChunk, served: str) -> None:
        match chunk:
            case FinishChunk(stats=stats):
                self.generations.labels(model_id, str(chunk.finish_reason)).inc()
                self.ttft.labels(model_id, served).observe(stats.time_to_first_token_ms / 1000)
                if stats.generation_tps > 0:
                    self.decode_rate.labels(model_id, served).observe(stats.generation_tps)
                self.tokens.labels(model_id, "prompt").inc(chunk.prompt_tokens)
                self.tokens.labels(model_id, "cached").inc(stats.cached_tokens)
                self.tokens.labels(model_id, "completion").inc(chunk.completion_tokens)
            case ErrorChunk(code=code):
                self.generations.labels(model_id, code).inc()
            case _:
                pass

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _LiveCollector(Collector):
    """What is read at scrape time from the node's live objects."""

    def __init__(
        self,
        node: Node,
        worker: Supervisor | None,
        cluster: ClusterAgent | None,
        refusals: Callable[[], Mapping[str, int]],
    ) -> None:
        self._node, self._worker, self._cluster, self._refusals = node, worker, cluster, refusals

    def collect(self) -> Iterator[Metric]:
        node, state = self._node, self._node.state
        yield _gauge("skulk_is_master", "1 on the cluster's master", 1 if node.is_master else 0)
        yield _gauge("skulk_cluster_nodes", "Topology members", len(state.topology.nodes))
        yield _gauge("skulk_instances", "Placed instances, cluster-wide", len(state.instances))
        yield _gauge(
            "skulk_event_log_applied_index", "Last event applied here", state.last_event_applied_idx
        )
        tasks = GaugeMetricFamily("skulk_tasks", "Tasks in State by status", labels=["status"])
        by_status: dict[str, int] = {}
        for task in state.tasks.values():
            by_status[task.task_status.value] = by_status.get(task.task_status.value, 0) + 1
        for status, count in sorted(by_status.items()):
            tasks.add_metric([status], count)
        yield tasks
        if self._worker is not None:
            runners = GaugeMetricFamily(
                "skulk_local_runners", "This node's runners by phase", labels=["phase", "model"]
            )
            counts: dict[tuple[str, str], int] = {}
            in_flight = 0
            for runner in self._worker.runners():
                key = (runner.reported, runner.model_id)
                counts[key] = counts.get(key, 0) + 1
                in_flight += runner.active_tasks
            for (phase, model), count in sorted(counts.items()):
                runners.add_metric([phase, model], count)
            yield runners
            yield _gauge(
                "skulk_in_flight_sequences", "Generations this node's runners serve", in_flight
            )
        refused = CounterMetricFamily(
            "skulk_authority_refusals", "Requests the authority policy refused", labels=["reason"]
        )
        for reason, count in sorted(self._refusals().items()):
            refused.add_metric([reason], count)
        yield refused
        yield _gauge(
            "skulk_memory_available_bytes",
            "RAM available on this machine",
            psutil.virtual_memory().available,
        )
        if self._cluster is not None:
            yield from self._fabric(self._cluster.diagnostics())

    def _fabric(self, fabric: FabricView) -> Iterator[Metric]:
        frames = fabric.get("frames", {})
        total = CounterMetricFamily(
            "skulk_fabric_frames", "Fabric frames by direction", labels=["direction"]
        )
        total.add_metric(["in"], frames.get("in", 0))
        total.add_metric(["out"], frames.get("out", 0))
        yield total
        dropped = CounterMetricFamily(
            "skulk_fabric_dropped_frames", "Fabric frames dropped, by reason", labels=["reason"]
        )
        for reason, count in sorted(frames.get("dropped", {}).items()):
            dropped.add_metric([reason], count)
        yield dropped
        data = CounterMetricFamily(
            "skulk_data_plane", "Data-plane stream counters", labels=["counter"]
        )
        for name, count in sorted(fabric.get("dataPlane", {}).items()):
            data.add_metric([name], count)
        yield data
        peers = fabric.get("peers", [])
        yield _gauge("skulk_fabric_peers", "Members this node has a live link to", len(peers))
        newest = max((int(p.get("lastIdx") or -1) for p in peers), default=-1)
        lag = max(0, newest - self._node.state.last_event_applied_idx)
        yield _gauge("skulk_event_log_lag", "Events a peer holds that this node lacks", lag)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class MetricsMiddleware:
    """Counts every routed request and times it to its last byte (streams included)."""

    def __init__(self, app: Any, metrics: NodeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def sending(message: Any) -> None:
            if message.get("type") == "http.response.start":
                status["code"] = int(message.get("status", 500))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = str(scope.get("path_template") or _UNMATCHED)
            method = str(scope.get("method", "GET"))
            self.metrics.requests.labels(method, route, str(status["code"])).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - started)
