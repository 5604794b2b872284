"""``/v1/tracing`` and ``/v1/traces*`` on an in-process node serving the demo model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.in_process import Served
from tests.chrome_trace import lanes, parse_chrome_trace
from tests.daemon.serving import DEMO, wait_for

CHAT = {
    "model": DEMO,
    "messages": [{"role": "user", "content": "Count: one, two,"}],
    "max_tokens": 6,
    "temperature": 0,
}


@pytest.fixture
def tracing(demo_app: Served) -> Iterator[Served]:
    """The shared demo node with tracing on for one test (off again after it)."""
    app = demo_app.app
    assert app.http.put("/v1/tracing", json={"enabled": True}).json() == {"enabled": True}
    try:
        yield demo_app
    finally:
        assert app.http.put("/v1/tracing", json={"enabled": False}).json() == {"enabled": False}


def _traced_task_ids(served: Served) -> list[str]:
    traces = served.app.get("/v1/traces").json()["traces"]
    return [t["taskId"] for t in traces]


def test_a_traced_request_has_api_master_and_runner_spans(tracing: Served) -> None:
    app = tracing.app
    assert app.get("/v1/tracing").json() == {"enabled": True}
    before = set(_traced_task_ids(tracing))
    response = app.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 200, response.text

    # The master's span ends when the task leaves State, just after the answer.
    def recorded() -> list[str] | None:
        new = [t for t in _traced_task_ids(tracing) if t not in before]
        if not new:
            return None
        record = app.get(f"/v1/traces/{new[0]}").json()
        return new if {s["lane"] for s in record["spans"]} >= {"api", "master"} else None

    [task_id] = wait_for(recorded, "the trace to be recorded", timeout=10)
    record = app.get(f"/v1/traces/{task_id}").json()
    assert record["modelId"] == DEMO and record["kind"] == "TextGeneration"
    by_name = {s["name"]: s for s in record["spans"]}
    assert {"request", "first token", "queue + prefill", "decode", "task in State"} <= set(by_name)
    assert (
        by_name["decode"]["args"]["completionTokens"]
        == response.json()["usage"]["completion_tokens"]
    )
    assert by_name["decode"]["lane"] == "runner rank 0"

    raw = app.get(f"/v1/traces/{task_id}/raw")
    assert raw.headers["content-disposition"] == f'attachment; filename="trace-{task_id}.json"'
    document = parse_chrome_trace(raw.text)
    [process] = lanes(document).values()
    assert process == {"api", "master", "runner rank 0"}
    summary = app.get(f"/v1/traces/{task_id}/stats").json()
    assert summary["totalMs"] > 0 and summary["spans"]["decode"]["count"] == 1

    cluster = app.get("/v1/traces/cluster").json()
    assert task_id in [t["taskId"] for t in cluster["traces"]]
    merged = app.get(f"/v1/traces/cluster/{task_id}").json()["spans"]
    assert merged == sorted(record["spans"], key=lambda s: (s["startUs"], s["nodeId"], s["lane"]))

    deleted = app.post("/v1/traces/delete", json={"taskIds": [task_id, "never-traced"]}).json()
    assert deleted == {"deleted": [task_id], "notFound": ["never-traced"]}
    assert app.get(f"/v1/traces/{task_id}").status_code == 404


def test_requests_are_not_traced_while_tracing_is_off(demo_app: Served) -> None:
    app = demo_app.app
    assert app.get("/v1/tracing").json() == {"enabled": False}
    before = set(_traced_task_ids(demo_app))
    assert app.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert set(_traced_task_ids(demo_app)) == before
    bad = app.get("/v1/traces/not%20an%20id")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_task_id"
    assert app.get("/v1/traces/unknown-task/raw").status_code == 404
