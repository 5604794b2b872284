"""The Traces and Performance pages on a real two-node cluster: a chat sent to the
member that does not host the runner is traced on both, and either member's page
opens it as one timeline with each node's lanes; each member's envelopes come
through the fan-out."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import Cluster, Tab
from tests.daemon.serving import DEMO, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

CHAT = {
    "model": DEMO,
    "messages": [{"role": "user", "content": "Count: one, two,"}],
    "max_tokens": 4,
    "temperature": 0,
}


def test_a_request_across_two_nodes_is_one_timeline(two_nodes: Cluster, tab: Tab) -> None:
    first, second = two_nodes.nodes
    state = first.get("/state").json()
    instance = next(iter(state["instances"][two_nodes.instance_id].values()))
    (host,) = instance["shardAssignments"]["nodeToRunner"]
    api_index = 1 if two_nodes.node_ids[0] == host else 0
    api_node = two_nodes.nodes[api_index]
    api_name = two_nodes.names[api_index]
    host_name = two_nodes.names[1 - api_index]

    assert httpx.put(f"{first.url}/v1/tracing", json={"enabled": True}).status_code == 200
    try:
        wait_for(
            lambda: second.get("/v1/tracing").json() == {"enabled": True},
            "tracing on at both members",
            timeout=30,
        )
        response = api_node.post("/v1/chat/completions", json=CHAT, timeout=120)
        assert response.status_code == 200, response.text

        def traced() -> str | None:
            for summary in first.get("/v1/traces/cluster").json()["traces"]:
                record = first.get(f"/v1/traces/cluster/{summary['taskId']}").json()
                if {"decode", "request"} <= {s["name"] for s in record["spans"]}:
                    return str(summary["taskId"])
            return None

        task_id = wait_for(traced, "a trace with the API's and the runner's spans", timeout=30)
    finally:
        httpx.put(f"{first.url}/v1/tracing", json={"enabled": False})

    page = tab.page
    page.goto(f"{first.url}/traces")
    row = page.get_by_role("table", name="Cluster traces").get_by_role(
        "row", name=re.compile(re.escape(task_id))
    )
    expect(row.get_by_role("cell", name=re.compile(re.escape(host_name)))).to_be_visible()
    row.get_by_role("link", name=task_id).click()
    timeline = page.get_by_role("group", name="Spans on a time axis")
    expect(timeline.get_by_role("group", name=f"api on {api_name}")).to_be_visible()
    expect(timeline.get_by_role("group", name=f"runner rank 0 on {host_name}")).to_be_visible()
    expect(
        timeline.get_by_role("button", name=re.compile(rf"^decode, runner rank 0 on {host_name}:"))
    ).to_be_visible()
    assert tab.console.errors == []

    # The host's envelope comes through the fan-out, named for its node.
    page.get_by_role("link", name="Performance").click()
    expect(page.get_by_role("region", name=f"{DEMO} on {host_name}")).to_be_visible()
    assert tab.console.errors == []
