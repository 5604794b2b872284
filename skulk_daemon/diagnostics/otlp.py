"""Exporting traced requests' spans to an OpenTelemetry collector (OTLP/HTTP).

Off unless ``tracing.otlp_endpoint`` is set. Every node exports its own spans of a
task with one trace id derived from the task id, so a collector joins the API node's,
the master's and the runner's parts into one trace. The SDK's batch processor sends
in the background (bounded queue; a collector that is down costs dropped spans, never
a stalled request). The endpoint is read on every export, so ``PUT /config`` takes
effect for the next traced request.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from skulk_core.diagnostics.traces import TraceSpan

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

EXPORT_DELAY_MILLIS: Final = 500
MAX_QUEUE: Final = 2048


def trace_id_of(task_id: str) -> int:
    """The OTLP trace id every node uses for ``task_id`` (128 bits, never zero)."""
    return int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:16], "big") or 1


class OtlpExport:
    def __init__(self, node_id: str, endpoint: Callable[[], str | None]) -> None:
        self._node_id = node_id
        self._endpoint = endpoint
        self._lock = threading.Lock()
        self._current: tuple[str, TracerProvider] | None = None

    def _provider(self) -> TracerProvider | None:
        endpoint = (self._endpoint() or "").rstrip("/")
        with self._lock:
            if self._current is not None and self._current[0] == endpoint:
                return self._current[1]
            if self._current is not None:
                self._current[1].shutdown()
                self._current = None
            if not endpoint:
                return None
            # NOTE: the exporter (protobuf and its HTTP stack, most of a second on a
            # busy machine) and the SDK are imported once an endpoint is set, not at
            # start-up.
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )
            from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
            from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
            from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

            provider = TracerProvider(
                resource=Resource.create({"service.name": "skulk", "skulk.node_id": self._node_id})
            )
            exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=5)
            provider.add_span_processor(
                BatchSpanProcessor(
                    exporter, schedule_delay_millis=EXPORT_DELAY_MILLIS, max_queue_size=MAX_QUEUE
                )
            )
            self._current = (endpoint, provider)
            return provider

    def export(self, task_id: str, model_id: str, spans: Sequence[TraceSpan]) -> None:
        provider = self._provider()
        if provider is None:
            return
        from opentelemetry.trace import (  # noqa: PLC0415 (with the SDK, above)
            NonRecordingSpan,
            SpanContext,
            TraceFlags,
            set_span_in_context,
        )

        tracer = provider.get_tracer("skulk")
        parent = set_span_in_context(
            NonRecordingSpan(
                SpanContext(
                    trace_id=trace_id_of(task_id),
                    span_id=secrets.randbits(64) or 1,
                    is_remote=True,
                    trace_flags=TraceFlags(TraceFlags.SAMPLED),
                )
            )
        )
        for span in spans:
            start_ns = span.start_us * 1000
            otel = tracer.start_span(
                span.name,
                context=parent,
                start_time=start_ns,
                attributes={
                    "skulk.task_id": task_id,
                    "skulk.model_id": model_id,
                    "skulk.lane": span.lane,
                    "skulk.node_id": span.node_id,
                    **{f"skulk.{k}": v for k, v in span.args.items() if _attribute(v)},
                },
            )
            otel.end(end_time=start_ns + (span.duration_us or 0) * 1000)

    def close(self) -> None:
        with self._lock:
            if self._current is not None:
                self._current[1].shutdown()
                self._current = None


def _attribute(value: object) -> bool:
    return isinstance(value, str | bool | int | float)
