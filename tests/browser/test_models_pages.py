"""The Models page (/catalog) and the Downloads page in a real browser, against one
real daemon pointed at the suite's local Hugging Face server (tests/hub/fake_hub.py).

A person finds the demo models in the catalog with their tags, searches the hub,
picks a quant and downloads it (progress visible, then installed), and on Downloads
watches, cancels and retries a transfer. One journey does it all on one model: search,
download, launch from its placement previews, be refused deleting its files while it
is placed (with what to do), chat. A hub that cannot be reached is shown as such.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Route, expect

from skulk_daemon.models.embedding_demo import with_embedding_demo
from skulk_daemon.models.installed import load_installed_models
from tests.browser.conftest import Tab, named, screenshot
from tests.daemon.serving import DEMO
from tests.daemon_process import DaemonProcess
from tests.hub.conftest import DEMO_REPO, TINY, seed_models_dir, standard_repos
from tests.hub.fake_hub import FakeHub

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

NODE_NAME = "models-node"
EMBEDDING = "local/all-minilm-l6-v2"
SLOW_TRANSFER = 256 * 1024
"""Bytes per second for a hub file a person can watch download (and cancel)."""


@pytest.fixture(scope="module")
def demo_gguf(shared_models_dir: Path) -> Path:
    installed = load_installed_models(shared_models_dir)
    with_embedding_demo(installed, shared_models_dir)
    demo = next(m for m in installed if m.card.model_id == DEMO)
    assert demo.card.gguf_file is not None
    return Path(demo.location) / demo.card.gguf_file


@pytest.fixture(scope="module")
def hub(demo_gguf: Path) -> Iterator[FakeHub]:
    with FakeHub(standard_repos(demo_gguf)) as served:
        yield served


@pytest.fixture(scope="module")
def node(
    hub: FakeHub, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path, demo_gguf: Path
) -> Iterator[DaemonProcess]:
    """One daemon with its own models dir (what it downloads stays out of other
    suites' catalogs), the demo models hard-linked in, the fake hub as its hub."""
    models = seed_models_dir(tmp_path_factory.mktemp("browser-models"), shared_models_dir)
    daemon = named(
        DaemonProcess(
            root=tmp_path_factory.mktemp("browser-models-node"),
            models_dir=models,
            extra_env={"HF_ENDPOINT": hub.url},
        ),
        NODE_NAME,
    )
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.kill()


def node_id(node: DaemonProcess) -> str:
    return str(node.get("/node_id").json())


def test_the_catalog_lists_the_demo_models_with_tags(node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{node.url}/catalog")
    expect(page.get_by_role("heading", name="Models", level=1)).to_be_visible()
    catalog = page.get_by_role("list", name="Model catalog")
    demo = catalog.get_by_role("article", name=DEMO)
    expect(demo.get_by_text("installed", exact=True)).to_be_visible()
    expect(demo.get_by_role("button", name=f"Launch {DEMO}")).to_be_visible()
    expect(demo.get_by_role("button", name=f"Chat with {DEMO}")).to_be_visible()
    embedding = catalog.get_by_role("article", name=EMBEDDING)
    expect(embedding.get_by_label(f"Tags for {EMBEDDING}").get_by_text("embedding")).to_be_visible()
    # An embedding model is not a chat model.
    expect(embedding.get_by_role("button", name=f"Chat with {EMBEDDING}")).to_have_count(0)
    expect(page.get_by_text("No model store is configured")).to_be_visible()
    assert tab.console.errors == []


def test_a_companion_is_badged_and_not_launchable(node: DaemonProcess, tab: Tab) -> None:
    # The demo catalog declares no companions: the real /v1/models answer is given a
    # drafter on the demo model, as a speculative-decoding card declares one.
    page = tab.page

    def with_drafter(route: Route) -> None:
        response = route.fetch()
        listing: dict[str, Any] = response.json()
        for item in listing["data"]:
            if item["id"] == DEMO:
                item["runtime"]["assistant_model_repo"] = EMBEDDING
        route.fulfill(response=response, json=listing)

    page.route("**/v1/models", with_drafter)
    page.goto(f"{node.url}/catalog")
    companion = page.get_by_role("list", name="Model catalog").get_by_role(
        "article", name=EMBEDDING
    )
    expect(companion.get_by_text("Drafter", exact=True)).to_be_visible()
    expect(companion.get_by_role("definition").filter(has_text=DEMO)).to_be_visible()
    expect(companion.get_by_role("button", name=f"Launch {EMBEDDING}")).to_have_count(0)


def test_search_pick_a_quant_and_download(node: DaemonProcess, hub: FakeHub, tab: Tab) -> None:
    page = tab.page
    searches: list[str] = []
    page.on("request", lambda r: searches.append(r.url) if "/models/search" in r.url else None)
    page.goto(f"{node.url}/catalog")
    # Typed a key at a time: the search waits for a pause, so one request goes out.
    page.get_by_role("searchbox", name="Search models").press_sequentially("tiny")
    result = page.get_by_role("list", name="Search results").get_by_role("article", name=TINY)
    expect(page.get_by_role("status").filter(has_text="results for “tiny”")).to_be_visible()
    assert [url.split("?")[1].split("&")[0] for url in searches] == ["query=tiny"]
    quant = result.get_by_role("combobox", name=f"Quantization for {TINY}")
    expect(quant).to_be_visible()
    # Every weight quant with its size; no projector among them.
    labels = quant.locator("option").all_inner_texts()
    assert any(re.match(r"Q4_K_M · \d", label) for label in labels), labels
    assert any(re.match(r"Q8_0 · \d", label) for label in labels), labels
    assert not any("mmproj" in label.lower() or "F16" in label for label in labels), labels
    quant.select_option("tiny-Q8_0.gguf")
    hub.bytes_per_second = SLOW_TRANSFER
    try:
        result.get_by_role("button", name=f"Download {TINY}").click()
        card = page.get_by_role("list", name="Model catalog").get_by_role("article", name=TINY)
        progress = card.get_by_role(
            "progressbar", name=f"Download progress for {TINY} on {NODE_NAME}"
        )
        expect(progress).to_be_visible()
        expect(card.get_by_text("downloading", exact=True)).to_be_visible()
    finally:
        hub.bytes_per_second = None
    expect(card.get_by_text("installed", exact=True)).to_be_visible(timeout=60_000)
    expect(card).to_contain_text(re.compile(r"completed 3(\.\d)? MB downloaded"))
    news = page.get_by_role("status").filter(
        has_text=f"Download of {TINY} on {NODE_NAME}: completed."
    )
    expect(news).to_have_count(1)
    screenshot(page, "models")
    listed = {m["id"]: m for m in node.get("/v1/models").json()["data"]}
    assert listed[TINY]["installed"] is True
    assert listed[TINY]["artifact_file"] == "tiny-Q8_0.gguf"
    assert tab.console.errors == []


def test_downloads_shows_cancels_and_retries_a_transfer(
    node: DaemonProcess, hub: FakeHub, tab: Tab
) -> None:
    page = tab.page
    me = node_id(node)
    assert node.post("/models/add", json={"model_id": DEMO_REPO}, timeout=60).status_code == 200
    body = {"target_node_id": me, "model_id": DEMO_REPO}
    hub.bytes_per_second = SLOW_TRANSFER
    try:
        assert node.post("/download/start", json=body, timeout=60).status_code == 200
        page.goto(f"{node.url}/downloads")
        table = page.get_by_role("table", name="Downloads in the cluster")
        row = table.get_by_role("row").filter(has=page.get_by_role("rowheader", name=DEMO_REPO))
        expect(row.get_by_role("cell", name=NODE_NAME, exact=True)).to_be_visible()
        expect(row.get_by_text("downloading", exact=True).first).to_be_visible()
        expect(
            row.get_by_role("progressbar", name=f"Download progress for {DEMO_REPO} on {NODE_NAME}")
        ).to_be_visible()
        expect(row.get_by_text(re.compile(r"\d+ KB/s|\d(\.\d)? MB/s"))).to_be_visible()
        screenshot(page, "downloads")

        row.get_by_role("button", name=f"Cancel download of {DEMO_REPO} on {NODE_NAME}").click()
        expect(row.get_by_text("cancelled", exact=True).first).to_be_visible()
        expect(page.get_by_role("status").filter(has_text="partial file is kept")).to_be_visible()
        row.get_by_role("button", name=f"Retry download of {DEMO_REPO} on {NODE_NAME}").click()
        expect(row.get_by_text("downloading", exact=True).first).to_be_visible()
    finally:
        httpx.delete(f"{node.url}/download/{me}/{DEMO_REPO}", timeout=30)
        hub.bytes_per_second = None
    assert tab.console.errors == []


def test_a_searched_model_downloads_launches_and_chats(node: DaemonProcess, tab: Tab) -> None:
    # The whole journey on one model, through the page only: found by search on the
    # local hub, one quant downloaded, placed from its previews, its files' deletion
    # refused while placed (with what to do), then chatted with.
    page = tab.page
    page.goto(f"{node.url}/catalog")
    page.get_by_role("searchbox", name="Search models").fill("gemma-3-270m")
    result = page.get_by_role("list", name="Search results").get_by_role("article", name=DEMO_REPO)
    quant = result.get_by_role("combobox", name=f"Quantization for {DEMO_REPO}")
    expect(quant.locator("option")).to_have_count(1)
    result.get_by_role("button", name=f"Download {DEMO_REPO}").click()
    card = page.get_by_role("list", name="Model catalog").get_by_role("article", name=DEMO_REPO)
    expect(card.get_by_text("installed", exact=True)).to_be_visible(timeout=120_000)

    previews = node.get("/instance/previews", params={"model_id": DEMO_REPO}).json()["previews"]
    invalid = [p for p in previews if p.get("error")]
    card.get_by_role("button", name=f"Launch {DEMO_REPO}").click()
    launch = page.get_by_role("dialog", name=f"Launch {DEMO_REPO}")
    choice = launch.get_by_role("radio").first
    expect(choice).to_be_checked()
    expect(choice).to_be_focused()
    memory = launch.get_by_role("list", name="Memory per node").first
    expect(memory.get_by_text(re.compile(rf"^{NODE_NAME}: \d"))).to_be_visible()
    if invalid:
        launch.get_by_text(re.compile(r"placements? that cannot run")).click()
        reasons = launch.get_by_role("list", name="Placements that cannot run")
        expect(reasons.get_by_role("listitem")).to_have_count(len(invalid))
        expect(reasons).to_contain_text(str(invalid[0]["error"]))
    launch.get_by_role("button", name=f"Place {DEMO_REPO}").click()
    expect(launch.get_by_role("status")).to_contain_text("ready", timeout=120_000)
    [instance_id] = node.get("/state").json()["instances"]
    try:
        expect(launch.get_by_role("status")).to_contain_text(instance_id)
        launch.get_by_role("button", name="Close").click()
        expect(card.get_by_text("placed · ready")).to_be_visible()

        card.get_by_role("button", name=f"Delete {DEMO_REPO}").click()
        confirm = page.get_by_role("dialog", name=f"Delete {DEMO_REPO}?")
        expect(confirm.get_by_role("button", name="Cancel")).to_be_focused()
        confirm.get_by_role("button", name="Delete files").click()
        alert = confirm.get_by_role("alert")
        expect(alert).to_contain_text(f"placed as instance {instance_id}")
        expect(alert).to_contain_text("Stop the instance first")
        page.keyboard.press("Escape")
        expect(confirm).to_have_count(0)
        expect(card.get_by_text("installed", exact=True)).to_be_visible()

        card.get_by_role("button", name=f"Chat with {DEMO_REPO}").click()
        expect(page).to_have_url(f"{node.url}/chat?model={DEMO_REPO.replace('/', '%2F')}")
        expect(page.get_by_label("Select chat model")).to_have_value(DEMO_REPO)
        page.get_by_label("Max tokens").fill("8")
        page.get_by_label("Chat message").fill("The capital of France is")
        page.get_by_role("button", name="Send message").click()
        reply = page.get_by_role("article", name="Assistant message")
        expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=300_000)
        expect(reply.locator(".chat-text")).not_to_have_text("")
        expect(page.get_by_role("alert")).to_have_count(0)
    finally:
        assert httpx.delete(f"{node.url}/instance/{instance_id}", timeout=30).status_code == 200
    assert tab.console.errors == []


def test_a_store_transfer_offers_retry_and_shows_the_refusal(node: DaemonProcess, tab: Tab) -> None:
    # No store runs in this suite: the listing is answered with one failed transfer,
    # as a store host reports it; the retry goes to the real node, which refuses.
    page = tab.page
    failed = {
        "modelId": TINY,
        "sourceRevision": None,
        "status": "failed",
        "progress": 0.25,
        "downloadedBytes": 1000,
        "totalBytes": 4000,
        "error": "the Hub refused: accept the terms",
    }
    page.route(
        re.compile(r".*/store/downloads$"),
        lambda route: (
            route.fulfill(json=[failed]) if route.request.method == "GET" else route.continue_()
        ),
    )
    page.goto(f"{node.url}/downloads")
    store = page.get_by_role("list", name="Model store transfers")
    expect(store.get_by_text("the Hub refused: accept the terms")).to_be_visible()
    store.get_by_role("button", name=f"Retry store download of {TINY}").click()
    expect(page.get_by_role("alert")).to_contain_text("Store not configured")


def test_a_phone_sees_the_search_and_the_catalog(node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(f"{node.url}/catalog")
    expect(page.get_by_role("searchbox", name="Search models")).to_be_visible()
    launch = page.get_by_role("button", name=f"Launch {DEMO}")
    launch.scroll_into_view_if_needed()
    expect(launch).to_be_in_viewport()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_an_unreachable_hub_is_shown(node: DaemonProcess, hub: FakeHub, tab: Tab) -> None:
    # Last in the module: the hub goes away.
    hub.__exit__(None, None, None)
    page = tab.page
    page.goto(f"{node.url}/catalog")
    page.get_by_role("searchbox", name="Search models").fill("anything-else")
    alert = page.get_by_role("list", name="Search results").get_by_role("alert")
    # The node's hub client retries a refused connection with backoff before it answers 502.
    expect(alert).to_contain_text("Hugging Face could not be reached", timeout=90_000)
    expect(alert).to_contain_text("HF_ENDPOINT")
    expect(alert.get_by_role("button", name="Retry")).to_be_visible()
