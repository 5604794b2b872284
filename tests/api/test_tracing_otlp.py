"""Traced requests are exported to an OpenTelemetry collector over OTLP/HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from skulk_daemon.diagnostics.otlp import trace_id_of
from tests.api.in_process import AppFactory
from tests.daemon.serving import DEMO, place, wait_for


class _Collector(ThreadingHTTPServer):
    requests: list[ExportTraceServiceRequest]


class _Receiver(BaseHTTPRequestHandler):
    server: _Collector

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            self.server.requests.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def collector() -> Iterator[_Collector]:
    server = _Collector(("127.0.0.1", 0), _Receiver)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _spans(collector: _Collector) -> list[tuple[str, Any, dict[str, Any]]]:
    """(span name, span, resource attributes) of everything received."""
    found = []
    for request in collector.requests:
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                found.extend((span.name, span, resource) for span in scope.spans)
    return found


def test_spans_of_a_traced_request_reach_the_collector(
    make_app: AppFactory, collector: _Collector
) -> None:
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    app = make_app(config_yaml=f"tracing:\n  otlp_endpoint: {endpoint}\n")
    place(app)
    assert app.http.put("/v1/tracing", json={"enabled": True}).status_code == 200
    body = {
        "model": DEMO,
        "messages": [{"role": "user", "content": "Count: one, two,"}],
        "max_tokens": 4,
    }
    assert app.post("/v1/chat/completions", json=body).status_code == 200
    wanted = {"request", "queue + prefill", "decode", "task in State"}
    wait_for(lambda: wanted <= {name for name, _, _ in _spans(collector)}, "the export", 15)
    [task_id] = [t["taskId"] for t in app.get("/v1/traces").json()["traces"]]
    received = _spans(collector)
    # One trace per task, whichever node exported a part of it.
    assert {span.trace_id for _, span, _ in received} == {trace_id_of(task_id).to_bytes(16, "big")}
    node_id = app.get("/node_id").json()
    mine = {"service.name": "skulk", "skulk.node_id": node_id}
    assert all(mine.items() <= r.items() for _, _, r in received)
    decode = next(span for name, span, _ in received if name == "decode")
    attributes = {a.key: a.value for a in decode.attributes}
    assert attributes["skulk.model_id"].string_value == DEMO
    assert attributes["skulk.lane"].string_value == "runner rank 0"
    assert decode.end_time_unix_nano > decode.start_time_unix_nano
