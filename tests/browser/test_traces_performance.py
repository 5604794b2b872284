"""The Traces and Performance pages on a real daemon serving the demo model, with the
reference echo provider installed so its managed capability node is real: tracing
switched on from the page, a chat through the API listed as a trace and opened as a
keyboard-navigable timeline, its Chrome trace downloaded; the demo model's envelope
after a few requests; the capability with its owner node and status."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Route, expect

from tests.browser.conftest import Tab, named, screenshot
from tests.daemon.serving import DEMO, place, wait_for
from tests.daemon_process import DaemonProcess
from tests.extension_site import REPO_ROOT, install_package, site_env

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

ECHO = REPO_ROOT / "examples" / "extensions" / "echo-provider"
NAME = "solo"
CHAT = {
    "model": DEMO,
    "messages": [{"role": "user", "content": "Count: one, two,"}],
    "max_tokens": 6,
    "temperature": 0,
}
ENVELOPES = "**/v1/diagnostics/performance-envelopes/cluster"


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    """One daemon with the echo provider installed and the demo model placed."""
    root = tmp_path_factory.mktemp("browser-traces")
    install_package(ECHO, root / "site")
    daemon = named(
        DaemonProcess(
            root=root / "node", models_dir=shared_models_dir, extra_env=site_env(root / "site")
        ),
        NAME,
    )
    daemon.start()
    try:
        place(daemon)
        yield daemon
    finally:
        daemon.kill()


def chat(node: DaemonProcess) -> None:
    response = node.post("/v1/chat/completions", json=CHAT, timeout=120)
    assert response.status_code == 200, response.text


def traced_ids(node: DaemonProcess) -> list[str]:
    return [t["taskId"] for t in node.get("/v1/traces/cluster").json()["traces"]]


def test_a_traced_chat_opens_as_a_timeline(node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{node.url}/traces")
    switch = page.get_by_role("switch", name="Trace new requests")
    expect(switch).not_to_be_checked()
    expect(switch).to_be_enabled()
    switch.click()
    expect(switch).to_be_checked()
    expect(page.get_by_text("Tracing is on")).to_be_visible()
    assert node.get("/v1/tracing").json() == {"enabled": True}

    before = set(traced_ids(node))
    chat(node)

    def recorded() -> str | None:
        new = [t for t in traced_ids(node) if t not in before]
        if not new:
            return None
        spans = node.get(f"/v1/traces/cluster/{new[0]}").json()["spans"]
        return new[0] if {"decode", "task in State"} <= {s["name"] for s in spans} else None

    task_id = wait_for(recorded, "the chat's trace", timeout=30)
    # The list refreshes by itself; the new trace's row names the demo model.
    traces = page.get_by_role("table", name="Cluster traces")
    link = traces.get_by_role("link", name=task_id)
    expect(link).to_be_visible()
    row = traces.get_by_role("row", name=re.compile(re.escape(task_id)))
    expect(row.get_by_role("cell", name=DEMO, exact=True)).to_be_visible()

    # The list refreshes every few seconds without taking the keyboard's place.
    link.focus()
    with page.expect_response(lambda r: r.url.endswith("/v1/traces/cluster")):
        pass
    expect(link).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{node.url}/traces/{task_id}")
    expect(page.get_by_role("heading", name=f"Trace {task_id}")).to_be_visible()
    timeline = page.get_by_role("group", name="Spans on a time axis")
    decode = timeline.get_by_role(
        "button", name=re.compile(rf"^decode, runner rank 0 on {NAME}: starts at \+.+, lasts .+")
    )
    expect(decode).to_be_visible()
    request = timeline.get_by_role("button", name=re.compile(rf"^request, api on {NAME}:"))
    expect(request).to_be_visible()
    expect(timeline.get_by_role("group", name=f"master on {NAME}")).to_be_visible()
    stats = page.get_by_role("table", name="Span timing")
    expect(stats.get_by_role("cell", name="decode", exact=True)).to_be_visible()

    # Keyboard: the spans are one tab stop; arrows move through them in time.
    page.get_by_role("button", name="Delete this node's copy").focus()
    page.keyboard.press("Tab")
    landed = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert landed and re.match(r"^[\w +]+, .+ on ", landed), landed
    page.keyboard.press("ArrowRight")
    moved = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert moved and moved != landed, moved
    details = page.locator(".span-details")
    expect(details.get_by_role("heading", name=moved.split(",", 1)[0])).to_be_visible()
    request.click()
    expect(details.get_by_role("heading", name="request")).to_be_visible()
    page.keyboard.press("ArrowDown")
    below = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert below and not below.startswith("request,"), below
    page.keyboard.press("End")
    last = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert last and not last.startswith("request,")
    page.keyboard.press("Home")
    first = page.evaluate("document.activeElement.getAttribute('aria-label')")
    page.keyboard.press("ArrowRight")
    second = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert first != second and second is not None
    expect(details.get_by_role("heading", name=second.split(",", 1)[0])).to_be_visible()
    expect(page.locator(".span-bar[tabindex='0']")).to_have_count(1)
    screenshot(page, "traces")

    # The Chrome trace download: what Perfetto opens.
    with page.expect_download() as download:
        page.get_by_role("link", name="Download Chrome trace JSON").click()
    assert download.value.suggested_filename == f"trace-{task_id}.json"
    document: dict[str, Any] = json.loads(Path(download.value.path()).read_text())
    assert "decode" in {e["name"] for e in document["traceEvents"]}
    assert document["otherData"]["taskId"] == task_id

    # Deleting this node's copy (the only one here) returns to the list without it.
    page.get_by_role("button", name="Delete this node's copy").click()
    expect(page).to_have_url(f"{node.url}/traces")
    expect(page.get_by_role("link", name=task_id)).to_have_count(0)
    assert task_id not in traced_ids(node)

    # Tracing off again from the page.
    switch = page.get_by_role("switch", name="Trace new requests")
    expect(switch).to_be_checked()
    switch.click()
    expect(switch).not_to_be_checked()
    expect(page.get_by_text("Tracing is off")).to_be_visible()
    assert node.get("/v1/tracing").json() == {"enabled": False}
    assert tab.console.errors == []


def test_an_unknown_trace_says_so(node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{node.url}/traces/never-traced")
    expect(page.get_by_role("alert")).to_contain_text("No member holds a trace of never-traced")


def test_no_traces_yet_says_how_and_a_partial_list_says_so(node: DaemonProcess, tab: Tab) -> None:
    page = tab.page

    def partial(route: Route) -> None:
        route.fulfill(
            json={
                "traces": [],
                "unreachableNodes": [{"nodeId": "12D3KooWgone", "error": "timed out"}],
            }
        )

    page.route("**/v1/traces/cluster", partial)
    page.goto(f"{node.url}/traces")
    expect(page.get_by_text("No traces yet. Turn on “Trace new requests” above")).to_be_visible()
    expect(page.get_by_role("status").filter(has_text="12D3KooWgone: timed out")).to_be_visible()


def test_a_failed_trace_list_read_is_shown_and_retried(node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    failures = [1]

    def once(route: Route) -> None:
        if failures:
            failures.pop()
            route.fulfill(status=502, json={"error": {"message": "peer fan-out broke"}})
        else:
            route.fallback()

    page.route("**/v1/traces/cluster", once)
    page.goto(f"{node.url}/traces")
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("The cluster's traces could not be read: peer fan-out broke")
    alert.get_by_role("button", name="Retry").click()
    expect(page.get_by_role("alert")).to_have_count(0)
    expect(page.get_by_text(re.compile(r"No traces yet|newest first"))).to_be_visible()


def test_a_refused_tracing_change_is_shown_and_undone(node: DaemonProcess, tab: Tab) -> None:
    # What a caller outside the trusted classes gets: the API's own 403 envelope.
    page = tab.page

    def refused(route: Route) -> None:
        if route.request.method != "PUT":
            route.fallback()
            return
        route.fulfill(status=403, json={"error": {"message": "not from here", "type": "x"}})

    page.route("**/v1/tracing", refused)
    page.goto(f"{node.url}/traces")
    switch = page.get_by_role("switch", name="Trace new requests")
    expect(switch).to_be_enabled()
    switch.press("Space")
    expect(page.get_by_role("alert")).to_contain_text("Tracing was not changed: not from here")
    expect(switch).not_to_be_checked()
    assert node.get("/v1/tracing").json() == {"enabled": False}


def test_the_demo_models_envelope_after_a_few_requests(node: DaemonProcess, tab: Tab) -> None:
    chat(node)
    # Two at once: the second is admitted while the first is in flight.
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda _: chat(node), range(2)))
    page = tab.page
    page.goto(f"{node.url}/performance")
    where = f"{DEMO} on {NAME}"
    card = page.get_by_role("region", name=where)
    expect(card).to_be_visible()
    expect(card.get_by_text(re.compile(r"^llama\.cpp/"))).to_be_visible()
    table = card.get_by_role("table", name=f"Performance envelope of {where}")
    first = table.get_by_role("row").nth(1)
    expect(first.get_by_role("rowheader")).to_have_text(re.compile(r"^\d+"))
    requests = int(first.get_by_role("cell").first.inner_text())
    assert requests >= 1
    levels = table.get_by_role("rowheader").all_inner_texts()
    assert len(levels) >= 2, f"one concurrency level after two requests at once: {levels}"
    expect(
        card.get_by_role(
            "img", name=f"Throughput and first-token latency against concurrency for {where}"
        )
    ).to_be_visible()
    expect(page.get_by_role("combobox", name="Filter by model")).to_contain_text(DEMO)
    screenshot(page, "performance")
    assert tab.console.errors == []
    assert tab.console.failed_loads == []


def test_the_capabilities_panel_lists_the_echo_node(node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{node.url}/performance")
    table = page.get_by_role("table", name="Managed capability nodes")
    row = table.get_by_role("row").filter(has_text="skulk.echo-provider")
    expect(row).to_have_count(1)
    expect(row.get_by_role("rowheader")).to_contain_text("Echo")
    expect(row.get_by_role("link", name=NAME)).to_have_attribute("href", re.compile(r"^/node/.+"))
    expect(row.get_by_text("ready", exact=True)).to_be_visible()
    expect(row.get_by_text("owner available")).to_be_visible()
    # Its descriptor action runs on this node, through POST /v1/capabilities/call.
    run = row.get_by_role("button", name="Run Ping")
    run.focus()
    page.keyboard.press("Enter")
    expect(row.get_by_role("status")).to_contain_text("ping")
    expect(run).to_be_focused()


def test_a_capability_not_heard_from_is_muted(node: DaemonProcess, tab: Tab) -> None:
    # The real /state, its echo node's last reading aged past 90 s and degraded.
    page = tab.page
    old = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()

    def aged(route: Route) -> None:
        response = route.fetch()
        state = response.json()
        for entries in state["capabilityNodes"].values():
            for entry in entries:
                entry.update(observedAt=old, status="degraded")
        route.fulfill(response=response, json=state)

    page.route("**/state", aged)
    page.goto(f"{node.url}/performance")
    row = page.get_by_role("table", name="Managed capability nodes").get_by_role("row").nth(1)
    expect(row).to_contain_text("skulk.echo-provider")
    expect(row.get_by_text("not heard from recently")).to_be_visible()
    expect(row.get_by_text("degraded", exact=True)).to_be_visible()


def test_no_envelopes_yet_says_how_to_get_some(node: DaemonProcess, tab: Tab) -> None:
    # A member that did not answer, and none with data: the answer the fan-out gives.
    page = tab.page

    def nothing(route: Route) -> None:
        route.fulfill(
            json={"nodes": [{"nodeId": "12D3KooWgone", "ok": False, "error": "timed out"}]}
        )

    page.route(ENVELOPES, nothing)
    page.goto(f"{node.url}/performance")
    expect(page.get_by_text("No performance data yet")).to_be_visible()
    expect(page.get_by_text("skulk bench <model> --runs 5")).to_be_visible()
    expect(page.get_by_role("status").filter(has_text="12D3KooWgone: timed out")).to_be_visible()


def test_usable_at_phone_width(node: DaemonProcess, tab: Tab) -> None:
    # A traced request to open, tracing switched through the API this time.
    assert httpx.put(f"{node.url}/v1/tracing", json={"enabled": True}).status_code == 200
    try:
        before = set(traced_ids(node))
        chat(node)

        def recorded() -> str | None:
            for task in (t for t in traced_ids(node) if t not in before):
                spans = node.get(f"/v1/traces/cluster/{task}").json()["spans"]
                if "request" in {s["name"] for s in spans}:
                    return task
            return None

        task_id = wait_for(recorded, "a trace with the API's request span", timeout=30)
    finally:
        httpx.put(f"{node.url}/v1/tracing", json={"enabled": False})
    page = tab.page
    page.set_viewport_size({"width": 390, "height": 844})
    pages = (
        ("/performance", "Performance", "Capabilities"),
        ("/traces", "Traces", "Cluster traces"),
        (f"/traces/{task_id}", f"Trace {task_id}", "Timeline"),
    )
    for path, heading, section in pages:
        page.goto(f"{node.url}{path}")
        expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
        expect(page.get_by_role("heading", name=section, exact=True)).to_be_visible()
        overflow = page.evaluate("document.documentElement.scrollWidth")
        assert overflow <= 390, f"{path} scrolls sideways at phone width ({overflow}px)"
    # The timeline scrolls inside its own box, and its spans stay reachable.
    expect(page.get_by_role("group", name="Spans on a time axis")).to_be_visible()
    page.get_by_role("button", name=re.compile(r"^request, api on ")).click()
    expect(page.locator(".span-details").get_by_role("heading", name="request")).to_be_visible()


def test_a_failed_fan_out_falls_back_to_this_nodes_envelopes(node: DaemonProcess, tab: Tab) -> None:
    chat(node)
    page = tab.page

    def refused(route: Route) -> None:
        route.fulfill(status=502, json={"error": {"message": "fan-out broke", "type": "x"}})

    page.route(ENVELOPES, refused)
    page.goto(f"{node.url}/performance")
    expect(page.get_by_role("status").filter(has_text="Showing this node only")).to_contain_text(
        "fan-out broke"
    )
    expect(page.get_by_role("region", name=f"{DEMO} on {NAME}")).to_be_visible()
