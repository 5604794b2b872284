"""``GET /v1/telemetry/preview``'s local queue on the session's serving node: once the
operator opts in, each generation served here queues one content-free sample, shown
exactly as it would be sent; nothing is queued while telemetry is off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.in_process import AppNode, Served
from tests.daemon.serving import DEMO

PROMPT = "Field telemetry never carries this sentence: one, two,"


def put_telemetry(app: AppNode, enabled: bool) -> None:
    config: dict[str, Any] = app.get("/config").json()["config"]
    config["telemetry"] = {"enabled": enabled}
    answer = app.http.put("/config", json=config)
    assert answer.status_code == 200, answer.text


@pytest.fixture
def opted_in(demo_app: Served) -> Iterator[AppNode]:
    put_telemetry(demo_app.app, True)
    try:
        yield demo_app.app
    finally:
        put_telemetry(demo_app.app, False)


def complete(app: AppNode) -> httpx.Response:
    body = {"model": DEMO, "prompt": PROMPT, "max_tokens": 3, "temperature": 0}
    answer = app.post("/v1/completions", json=body)
    assert answer.status_code == 200, answer.text
    return answer


def test_a_served_generation_queues_one_content_free_sample(opted_in: AppNode) -> None:
    before = len(opted_in.get("/v1/telemetry/preview").json()["pending"])
    usage = complete(opted_in).json()["usage"]
    preview = opted_in.get("/v1/telemetry/preview")
    body = preview.json()
    assert body["enabled"] is True and body["consent"] == "granted"
    assert len(body["pending"]) == before + 1
    sample = body["pending"][-1]
    assert sample["model_id"] == DEMO
    assert sample["prompt_tokens"] == usage["prompt_tokens"]
    assert sample["completion_tokens"] == usage["completion_tokens"]
    assert sample["time_to_first_token_ms"] > 0
    assert sample["hardware_class"] and sample["engine"].startswith("llama.cpp/")
    assert sample["failure_class"] is None
    assert "never carries" not in preview.text  # no prompt, no completion text
    assert body["dropped_since_start"] == 0


def test_nothing_is_queued_while_telemetry_is_off(demo_app: Served) -> None:
    app = demo_app.app
    before = app.get("/v1/telemetry/preview").json()
    assert before["enabled"] is False
    complete(app)
    assert app.get("/v1/telemetry/preview").json()["pending"] == before["pending"]
