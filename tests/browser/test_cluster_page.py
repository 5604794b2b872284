"""The Cluster page on a real two-node cluster: both members in the topology with
their facts, the placed demo instance with its runner's live status, and each node's
live diagnostics one button away."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import Route, expect

from tests.browser.conftest import Cluster, Tab, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]


def test_the_topology_shows_every_member(two_nodes: Cluster, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{two_nodes.nodes[0].url}/cluster")
    members = page.get_by_role("list", name="Cluster members")
    for node_id, name in zip(two_nodes.node_ids, two_nodes.names, strict=True):
        card = members.get_by_role("article", name=name)
        expect(card).to_be_visible()
        expect(card.get_by_text(node_id)).to_be_visible()
        expect(card.get_by_text(re.compile(r"used of"))).to_be_visible()
        expect(card.get_by_text("llama_cpp", exact=False)).to_be_visible()
    expect(page.get_by_role("button", name="Inspect live node diagnostics")).to_have_count(2)
    # One of them is the master, with the election term.
    expect(members.get_by_text(re.compile(r"master · term \d+"))).to_have_count(1)
    # The placed demo model and its runner, live.
    instances = page.get_by_role("table", name="Placed instances and their runners")
    expect(instances.get_by_text("local/gemma-3-270m-q4_k_m")).to_be_visible()
    expect(instances.get_by_text("ready")).to_be_visible()
    expect(page.get_by_text("1/1")).to_be_visible()
    # The runner's host is one click from its diagnostics.
    host_link = instances.get_by_role("link")
    expect(host_link).to_have_count(1)
    assert host_link.inner_text() in two_nodes.names
    page.wait_for_timeout(500)  # the links are drawn after layout
    screenshot(page, "cluster")
    assert tab.console.errors == []
    assert tab.console.failed_loads == []


def test_the_same_cluster_from_the_other_member(two_nodes: Cluster, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{two_nodes.nodes[1].url}/")
    members = page.get_by_role("list", name="Cluster members")
    for name in two_nodes.names:
        expect(members.get_by_role("article", name=name)).to_be_visible()


def test_inspect_opens_a_peers_live_diagnostics(two_nodes: Cluster, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{two_nodes.nodes[0].url}/cluster")
    # The second member is another process: its bundle comes through the fan-out.
    peer_name = two_nodes.names[1]
    card = page.get_by_role("article", name=peer_name)
    card.get_by_role("button", name="Inspect live node diagnostics").click()
    expect(page).to_have_url(f"{two_nodes.nodes[0].url}/node/{two_nodes.node_ids[1]}")
    expect(page.get_by_role("heading", name=f"Node diagnostics: {peer_name}")).to_be_visible()
    bundle = page.get_by_role("region", name="Node bundle")
    expect(bundle.get_by_text(two_nodes.node_ids[1]).first).to_be_visible()
    findings = page.get_by_role("list", name="Doctor findings")
    expect(findings.get_by_role("listitem").first).to_be_visible()
    for section in ("Runners and phases", "Data plane", "Timeline"):
        expect(page.get_by_role("region", name=section)).to_be_visible()
    screenshot(page, "node-diagnostics")
    # Reload keeps the deep link.
    page.reload()
    expect(page.get_by_role("heading", name=f"Node diagnostics: {peer_name}")).to_be_visible()
    assert tab.console.errors == []


def test_the_runner_shows_on_its_nodes_diagnostics(two_nodes: Cluster, tab: Tab) -> None:
    state = two_nodes.nodes[0].get("/state").json()
    instance = next(iter(state["instances"][two_nodes.instance_id].values()))
    (host,) = instance["shardAssignments"]["nodeToRunner"]
    page = tab.page
    page.goto(f"{two_nodes.nodes[0].url}/node/{host}")
    runners = page.get_by_role("region", name="Runners and phases")
    expect(runners.get_by_text("local/gemma-3-270m-q4_k_m")).to_be_visible()
    # The runner's own process, beside the daemon's.
    processes = page.get_by_role("region", name="Processes and providers")
    expect(processes.get_by_role("cell", name=re.compile(r"^runner "))).to_have_count(1)
    expect(processes.get_by_role("cell", name=re.compile(r"^daemon "))).to_have_count(1)


def test_an_unknown_node_says_what_is_wrong(two_nodes: Cluster, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{two_nodes.nodes[0].url}/node/no-such-node")
    expect(page.get_by_role("alert")).to_contain_text("no-such-node")
    expect(page.get_by_role("button", name="Retry")).to_be_visible()


def test_each_member_names_the_member_it_is_linked_to(two_nodes: Cluster, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{two_nodes.nodes[0].url}/cluster")
    first, second = two_nodes.names
    alpha = page.get_by_role("article", name=first)
    expect(alpha.get_by_role("definition").filter(has_text=second)).to_have_count(1)
    beta = page.get_by_role("article", name=second)
    expect(beta.get_by_role("definition").filter(has_text=first)).to_have_count(1)


def satellite(node_id: str, title: str, status: str, observed_at: str) -> dict[str, Any]:
    """One ``/state`` ``capabilityNodes`` entry, as a plugin host publishes it."""
    return {
        "pluginId": f"example.{title.lower()}",
        "nodeId": f"{title.lower()}-node",
        "bundleId": "bundle",
        "version": "1.0.0",
        "title": title,
        "status": status,
        "ownerAvailable": True,
        "operationsActive": 0,
        "surfaces": [{"kind": "link", "url": "http://127.0.0.1:9/ui", "ready": True}],
        "actions": [],
        "observedAt": observed_at,
        "hostNodeId": node_id,
    }


def test_capability_satellites_hang_off_their_host(two_nodes: Cluster, tab: Tab) -> None:
    # No plugin owner runs in this suite: the real /state is answered with two
    # satellites added to the first member, as a host running them reports them.
    # Every surface is a loopback URL: it opens only from a browser on its host, so the
    # page (opened over loopback from the first member) links the first member's and
    # says why it cannot open the second's.
    page = tab.page
    host, other = two_nodes.node_ids
    now = datetime.now(UTC)

    def with_satellites(route: Route) -> None:
        response = route.fetch()
        state = response.json()
        state["capabilityNodes"] = {
            host: [
                satellite(host, "Studio", "ready", now.isoformat()),
                satellite(host, "Archive", "degraded", (now - timedelta(minutes=5)).isoformat()),
            ],
            other: [satellite(other, "Relay", "ready", now.isoformat())],
        }
        route.fulfill(response=response, json=state)

    page.route("**/state", with_satellites)
    page.goto(f"{two_nodes.nodes[0].url}/cluster")
    satellites = page.get_by_role("list", name=f"Capability nodes on {two_nodes.names[0]}")
    expect(satellites.get_by_role("listitem")).to_have_count(2)
    expect(satellites.get_by_role("link", name="Open Studio")).to_have_attribute(
        "rel", "noopener noreferrer"
    )
    expect(satellites.get_by_text("degraded, not heard from recently")).to_be_visible()
    remote = page.get_by_role("list", name=f"Capability nodes on {two_nodes.names[1]}")
    expect(remote.get_by_text("unreachable from this browser", exact=True)).to_be_visible()
    expect(remote).to_contain_text(f"Open it from a browser on {two_nodes.names[1]}")
    expect(remote.get_by_role("link")).to_have_count(0)


def test_a_failed_runner_shows_why(two_nodes: Cluster, tab: Tab) -> None:
    # The real /state, with the demo runner reported failed as a supervisor reports it.
    page = tab.page

    def failed(route: Route) -> None:
        response = route.fetch()
        state = response.json()
        instance = next(iter(state["instances"][two_nodes.instance_id].values()))
        (runner_id,) = instance["shardAssignments"]["runnerToShard"]
        state["runners"][runner_id] = {"RunnerFailed": {"errorMessage": "out of memory"}}
        route.fulfill(response=response, json=state)

    page.route("**/state", failed)
    page.goto(f"{two_nodes.nodes[0].url}/cluster")
    instances = page.get_by_role("table", name="Placed instances and their runners")
    expect(instances.get_by_text("failed", exact=True)).to_be_visible()
    expect(instances.get_by_text("out of memory")).to_be_visible()
    expect(page.get_by_text("0/1")).to_be_visible()
