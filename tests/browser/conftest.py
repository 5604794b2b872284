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
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import pytest
from _pytest.runner import runtestprotocol
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Frame,
    Page,
    Playwright,
    ViewportSize,
    expect,
    sync_playwright,
)
from playwright.sync_api import Error as PlaywrightError

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


# NOTE: package scope, not session: Playwright's sync API runs an event loop on this
# thread while it is open, so a worker's later (non-browser) modules could not call
# asyncio.run() until the session ended. The ``browser`` group keeps this package's
# modules together on one worker, so the driver, Chromium and the daemons below start
# once for all of them (each start cost a module seconds of CPU) and end with its last.
@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"the browser tests drive Debian's chromium at {CHROMIUM}: apt-get install chromium"
        )
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="package")
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


VIEWPORT: Final = ViewportSize(width=1280, height=800)


NETWORK_CHANGED: Final = "ERR_NETWORK_CHANGED"
"""What Chromium fails every request in flight with when the host's addresses change:
another worker's test adding a veth pair for its LAN (tests/security/lan.py,
tests/lan/netns.py) does that, and a page whose module load fails so is broken."""

_consoles: list[Console] = []
"""The consoles the running test watched (see :func:`pytest_runtest_protocol`)."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Run a browser test once more if it failed while its page saw the host's network
    change (:data:`NETWORK_CHANGED`): that failure says nothing about the page. Any
    other failure, or that one twice, is reported as it is."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    _consoles.clear()
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    changed = any(
        NETWORK_CHANGED in line
        for console in _consoles
        for line in (*console.errors, *console.failed_loads)
    )
    if changed and any(report.failed for report in reports):
        if isinstance(item, pytest.Function):
            item._initrequest()  # fresh fixture requests, as pytest-rerunfailures does
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


@contextmanager
def watched(page: Page) -> Iterator[Tab]:
    """``page`` with a new :class:`Console` listening while the block runs."""
    console = Console()
    _consoles.append(console)
    page.on("console", console.on_console)
    page.on("pageerror", console.on_page_error)
    try:
        yield Tab(page, console)
    finally:
        page.remove_listener("console", console.on_console)
        page.remove_listener("pageerror", console.on_page_error)


STORAGE: Final = "local_storage,indexeddb,cache_storage,service_workers,file_systems"
"""What a page can keep for an origin (cookies are cleared with the context's)."""


class ReusedPage:
    """One page a module's tests take turns on, each from a blank start.

    A page is a browser window with its own renderer processes: opening one cost
    Chromium about 0.6 CPU-s more than navigating one already open, for every test.
    Between tests the page is put back as a new one would be: routes gone, the
    viewport back, every origin it opened cleared of its storage and cookies, and
    left on ``about:blank`` (so nothing of the last test still polls). What cannot be
    undone on a page (``page.clock``, an init script) is for a test that takes
    ``fresh_tab``; a page that cannot be put back is replaced."""

    def __init__(self, context: BrowserContext) -> None:
        self.context = context
        self.origins: set[str] = set()
        self.page = self._open()

    def _open(self) -> Page:
        page = self.context.new_page()
        page.on("framenavigated", self._visited)
        return page

    def _visited(self, frame: Frame) -> None:
        url = urlsplit(frame.url)
        if url.scheme in ("http", "https"):
            self.origins.add(f"{url.scheme}://{url.netloc}")

    def reset(self) -> None:
        try:
            # A test's routes may be mid-fetch (pages poll): let them go.
            self.page.unroute_all(behavior="ignoreErrors")
            self.page.goto("about:blank")
            self.page.set_viewport_size(VIEWPORT)
        except PlaywrightError:
            self.page.close()
            self.page = self._open()
        session = self.context.new_cdp_session(self.page)
        try:
            for origin in sorted(self.origins):
                session.send(
                    "Storage.clearDataForOrigin", {"origin": origin, "storageTypes": STORAGE}
                )
        finally:
            session.detach()
        self.origins.clear()
        self.context.clear_cookies()


def new_context(browser: Browser) -> BrowserContext:
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(WAIT_MS)
    return context


@pytest.fixture(scope="module")
def reused_page(browser: Browser) -> Iterator[ReusedPage]:
    context = new_context(browser)
    try:
        yield ReusedPage(context)
    finally:
        context.close()


@pytest.fixture
def tab(reused_page: ReusedPage) -> Iterator[Tab]:
    """A blank page at 1280x800 with nothing stored, its console watched (the
    module's one page, put back after each test: :class:`ReusedPage`)."""
    try:
        with watched(reused_page.page) as tab:
            yield tab
    finally:
        reused_page.reset()


@pytest.fixture
def fresh_tab(browser: Browser) -> Iterator[Tab]:
    """A page of its own in a new browser context, for a test that changes what a
    reused page could not put back (a fake clock, an init script)."""
    context = new_context(browser)
    try:
        with watched(context.new_page()) as tab:
            yield tab
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


@pytest.fixture(scope="package")
def one_node(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    """One daemon, nothing placed (the shell's and the settings' modules share it: a
    test that changes it puts it back)."""
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


@pytest.fixture(scope="package")
def two_nodes(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[Cluster]:
    """Two daemons on loopback joined by the fabric, the demo model placed on them
    (the Cluster page's and the cross-node traces' modules share them)."""
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
