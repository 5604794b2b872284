"""The browser layer: headless Debian Chromium (``/usr/bin/chromium``, which
``.ci/run`` installs; the suite downloads no browser) driven by Playwright, against
real daemons started as subprocesses.

Every module here runs in the one ``browser`` xdist group, so a single worker holds the
browser. Tests select by role and accessible name, never by CSS class: those names are
the dashboard's contract with its users and with other clients.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from tests.daemon.serving import place, wait_for
from tests.daemon_process import REPO_ROOT, DaemonProcess

CHROMIUM: Final = Path("/usr/bin/chromium")
SCREENSHOTS_DIR: Final = REPO_ROOT / "docs" / "screenshots"
SCREENSHOTS_ENV: Final = "SKULK_SCREENSHOTS"
WAIT_MS: Final = 20_000
"""How long a locator waits for what a live page shows (the state polls every 2 s)."""
expect.set_options(timeout=WAIT_MS)


@dataclass
class Console:
    """What a page said: console errors and uncaught exceptions, with failed loads."""

    errors: list[str] = field(default_factory=list)
    """Console errors and uncaught exceptions: the page's own failures."""
    failed_loads: list[str] = field(default_factory=list)
    """Requests the browser logged as failed (a 4xx/5xx answer): a page may show and
    retry these (a peer's diagnostics timing out), so tests say when they expect none."""

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        line = f"{message.text} at {message.location.get('url')}"
        if message.text.startswith("Failed to load resource"):
            self.failed_loads.append(line)
        else:
            self.errors.append(line)

    def on_page_error(self, error: Exception) -> None:
        self.errors.append(f"uncaught: {error}")


# NOTE: module scope, not session: Playwright's sync API runs an event loop on this
# thread while it is open, so a worker's later (non-browser) modules could not call
# asyncio.run() until the session ended.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"the browser tests drive Debian's chromium at {CHROMIUM}: apt-get install chromium"
        )
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
    try:
        yield browser
    finally:
        browser.close()


@dataclass
class Tab:
    page: Page
    console: Console


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    """A fresh browser context and page at 1280x800, its console watched."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    console = Console()
    page.on("console", console.on_console)
    page.on("pageerror", console.on_page_error)
    try:
        yield Tab(page, console)
    finally:
        context.close()


def screenshot(page: Page, name: str) -> None:
    """Saves ``docs/screenshots/<name>.png`` when ``SKULK_SCREENSHOTS=1`` (the README's
    pictures are made this way); otherwise does nothing."""
    if os.environ.get(SCREENSHOTS_ENV) != "1":
        return
    SCREENSHOTS_DIR.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS_DIR / f"{name}.png"), full_page=True)


def named(daemon: DaemonProcess, name: str) -> DaemonProcess:
    """``daemon`` with ``node.friendly_name`` set in its skulk.yaml (two loopback nodes
    share a hostname; people tell them apart by these names)."""
    daemon.config_home.mkdir(parents=True, exist_ok=True)
    (daemon.config_home / "skulk.yaml").write_text(f"node:\n  friendly_name: {name}\n")
    return daemon


# -- onboarding (issue #37's pages) ---------------------------------------------------
def onboarded(daemon: DaemonProcess) -> DaemonProcess:
    """``daemon`` with its first-run welcome already done (``POST /onboarding``): the
    welcome is a modal over the landing page, which a fresh node shows until then."""
    response = daemon.post("/onboarding")
    assert response.status_code == 200, response.text
    return daemon


@pytest.fixture(scope="module")
def one_node(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    """One daemon, nothing placed."""
    daemon = named(
        DaemonProcess(root=tmp_path_factory.mktemp("browser-node"), models_dir=shared_models_dir),
        "solo",
    )
    daemon.start()
    try:
        yield onboarded(daemon)
    finally:
        daemon.kill()


@dataclass(frozen=True)
class Cluster:
    nodes: list[DaemonProcess]
    node_ids: list[str]
    names: list[str]
    instance_id: str


@pytest.fixture(scope="module")
def two_nodes(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[Cluster]:
    """Two daemons on loopback joined by the fabric, the demo model placed on them."""
    root = tmp_path_factory.mktemp("browser-cluster")
    first = named(DaemonProcess(root=root / "a", models_dir=shared_models_dir), "alpha")
    second = named(
        DaemonProcess(root=root / "b", models_dir=shared_models_dir, peers=[first.fabric_address]),
        "beta",
    )
    nodes = [first, second]
    try:
        for node in nodes:
            onboarded(node.start())
        ids = [str(node.get("/node_id").json()) for node in nodes]

        def joined() -> dict[str, object] | None:
            state: dict[str, object] = first.get("/state").json()
            identities = state.get("nodeIdentities")
            members = set(getattr(state.get("topology"), "get", lambda _k: [])("nodes") or [])
            if members >= set(ids) and isinstance(identities, dict) and set(ids) <= set(identities):
                return state
            return None

        state = wait_for(joined, "both members in the topology")
        identities = state["nodeIdentities"]
        assert isinstance(identities, dict)
        names = [str(identities[i]["friendlyName"]) for i in ids]
        yield Cluster(nodes, ids, names, place(first))
    finally:
        for node in nodes:
            node.kill()
