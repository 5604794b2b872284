"""``GET /metrics`` parses as Prometheus text and its counters move with traffic."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.api.in_process import Served
from tests.daemon.serving import DEMO

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(served: Served) -> Samples:
    response = served.app.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_counters_and_histograms_move_with_a_generation(demo_app: Served) -> None:
    before = _scrape(demo_app)
    response = demo_app.app.post(
        "/v1/chat/completions",
        json={
            "model": DEMO,
            "messages": [{"role": "user", "content": "Count: one, two,"}],
            "max_tokens": 5,
            "temperature": 0,
        },
    )
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    refused = demo_app.app.post(
        "/place_instance", content=b"{}", headers={"Content-Type": "text/plain"}
    )
    assert refused.status_code == 415
    after = _scrape(demo_app)

    route = {"method": "POST", "route": "/v1/chat/completions", "status": "200"}
    assert _value(after, "skulk_http_requests_total", **route) == (
        _value(before, "skulk_http_requests_total", **route) + 1
    )
    assert (
        _value(
            after,
            "skulk_http_request_duration_seconds_count",
            method="POST",
            route="/v1/chat/completions",
        )
        >= 1
    )
    model = {"model": DEMO, "served": "local"}
    assert _value(after, "skulk_time_to_first_token_seconds_count", **model) == (
        _value(before, "skulk_time_to_first_token_seconds_count", **model) + 1
    )
    assert _value(after, "skulk_tokens_total", model=DEMO, kind="completion") == (
        _value(before, "skulk_tokens_total", model=DEMO, kind="completion")
        + usage["completion_tokens"]
    )
    assert _value(after, "skulk_tokens_total", model=DEMO, kind="prompt") == (
        _value(before, "skulk_tokens_total", model=DEMO, kind="prompt") + usage["prompt_tokens"]
    )
    ended = {"model": DEMO, "outcome": "length"}
    assert _value(after, "skulk_generations_total", **ended) == (
        _value(before, "skulk_generations_total", **ended) + 1
    )
    reason = {"reason": "unsupported_media_type"}
    assert _value(after, "skulk_authority_refusals_total", **reason) == (
        _value(before, "skulk_authority_refusals_total", **reason) + 1
    )
    # The live gauges: this node is the master of a one-node cluster with a ready runner.
    assert _value(after, "skulk_is_master") == 1
    assert _value(after, "skulk_cluster_nodes") == 1
    assert _value(after, "skulk_local_runners", phase="ready", model=DEMO) == 1
    assert _value(after, "skulk_in_flight_sequences") == 0
