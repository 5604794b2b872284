"""The dashboard's shell in a real browser against a real daemon: it loads clean under
its CSP, routes on the client (deep links, reload, back and forward, not found), shows
the connection, and collapses its navigation on a phone."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import Tab, screenshot
from tests.daemon_process import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

NAV = ["Cluster", "Models", "Chat", "Downloads", "Traces", "Performance", "Plugins"]
ALLOWED_SOURCES = {"'self'", "'none'", "data:", "blob:"}
"""Every source a CSP directive may name: the node itself, nothing, or in-page data."""
WATCH_CSP = """
  window.__violations = [];
  document.addEventListener("securitypolicyviolation", (e) =>
    window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
"""


def test_the_page_loads_clean_under_its_csp(one_node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    response = page.goto(f"{one_node.url}/")
    assert response is not None and response.status == 200
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    nav = page.get_by_role("navigation")
    for name in NAV:
        expect(nav.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Settings")).to_be_visible()
    expect(page.get_by_role("main").get_by_role("heading", name="Cluster", level=1)).to_be_visible()
    expect(page.get_by_role("status")).to_have_text(re.compile("Connected"))
    expect(page.get_by_text("solo · 1 node")).to_be_visible()
    assert tab.console.errors == []
    assert tab.console.failed_loads == []


def test_a_deep_link_survives_reload_and_history(one_node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{one_node.url}/chat")
    expect(page.get_by_role("heading", name="Chat", level=1)).to_be_visible()
    expect(page).to_have_title(re.compile("^Chat"))
    expect(page.get_by_role("link", name="Chat", exact=True)).to_have_attribute(
        "aria-current", "page"
    )
    page.reload()
    expect(page.get_by_role("heading", name="Chat", level=1)).to_be_visible()

    page.get_by_role("link", name="Traces", exact=True).click()
    expect(page).to_have_url(f"{one_node.url}/traces")
    expect(page.get_by_role("heading", name="Traces", level=1)).to_be_visible()
    page.go_back()
    expect(page).to_have_url(f"{one_node.url}/chat")
    expect(page.get_by_role("heading", name="Chat", level=1)).to_be_visible()
    page.go_forward()
    expect(page.get_by_role("heading", name="Traces", level=1)).to_be_visible()
    assert tab.console.errors == []


def test_an_unknown_page_says_so(one_node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{one_node.url}/cluster")
    # A path the server serves the shell for, with nothing the page's router knows:
    # reached by navigating inside the app (history), it is the page's not-found view.
    page.evaluate("history.pushState(null, '', '/cluster/nowhere')")
    page.evaluate("dispatchEvent(new PopStateEvent('popstate'))")
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    page.get_by_role("link", name="Go to the cluster").click()
    expect(page.get_by_role("heading", name="Cluster", level=1)).to_be_visible()


def test_settings_opens_as_a_dialog(one_node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{one_node.url}/cluster")
    page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert tab.console.errors == []


def test_the_nav_collapses_on_a_phone(one_node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{one_node.url}/cluster")
    expect(page.get_by_role("link", name="Models", exact=True)).to_be_hidden()
    menu = page.get_by_role("button", name="Menu")
    expect(menu).to_have_attribute("aria-expanded", "false")
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    page.get_by_role("link", name="Models", exact=True).click()
    expect(page.get_by_role("heading", name="Models", level=1)).to_be_visible()
    expect(page.get_by_role("link", name="Models", exact=True)).to_be_hidden()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_keyboard_reaches_the_nav_with_visible_focus(one_node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{one_node.url}/cluster")
    expect(page.get_by_role("heading", name="Cluster", level=1)).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    for _ in range(8):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == "Cluster":
            break
    focused = page.locator(":focus")
    expect(focused).to_have_text("Cluster")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{one_node.url}/cluster")


def test_a_stopped_node_shows_unreachable_and_recovers(one_node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{one_node.url}/cluster")
    status = page.get_by_role("status")
    expect(status).to_have_text(re.compile("Connected"))
    screenshot(page, "shell")
    one_node.stop()
    try:
        expect(status).to_have_text(re.compile("unreachable"), timeout=30_000)
        expect(page.get_by_role("alert")).to_contain_text("as it was last seen")
    finally:
        one_node.start()
    # The backoff is capped, so the page finds the node again by itself.
    expect(status).to_have_text(re.compile("Connected"), timeout=60_000)
    expect(page.get_by_role("alert")).to_have_count(0)


def test_the_page_loads_by_the_name_localhost(one_node: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"http://localhost:{one_node.port}/cluster")
    expect(page.get_by_role("status")).to_have_text(re.compile("Connected"))
    expect(page.get_by_role("article", name="solo")).to_be_visible()
    assert tab.console.errors == []


def test_the_csp_is_strict_and_every_page_keeps_to_it(
    one_node: DaemonProcess, fresh_tab: Tab
) -> None:
    # A page of its own: the init script below stays on a page for good.
    tab = fresh_tab
    page = tab.page
    response = page.goto(f"{one_node.url}/")
    assert response is not None
    policy = {
        name: sources
        for name, *sources in (
            part.split() for part in response.headers["content-security-policy"].split(";")
        )
    }
    # No inline script or style, no eval, no third-party origin, nothing framed or based.
    assert set(policy) >= {"default-src", "script-src", "style-src", "object-src", "base-uri"}
    assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    for name, sources in policy.items():
        assert set(sources) <= ALLOWED_SOURCES, f"{name} allows {sources}"

    origins: set[str] = set()
    page.on("request", lambda r: origins.add("{0.scheme}://{0.netloc}".format(urlsplit(r.url))))
    page.add_init_script(WATCH_CSP)
    page.goto(f"{one_node.url}/cluster")
    # Through every page and the Settings dialog in one document, so what a page draws
    # late is still watched when the test looks.
    for name in NAV:
        page.get_by_role("navigation").get_by_role("link", name=name, exact=True).click()
        expect(page.get_by_role("main").get_by_role("heading", name=name, level=1)).to_be_visible()
        inline = page.evaluate(
            """() => [...document.querySelectorAll("*")].flatMap((el) => [
                 ...(el.tagName === "SCRIPT" && !el.src ? ["<script> without src"] : []),
                 ...[...el.attributes].filter((a) => /^on/i.test(a.name)).map((a) => a.name),
               ])"""
        )
        assert inline == [], f"{name} has inline script: {inline}"
    page.get_by_role("button", name="Settings").click()
    settings = page.get_by_role("dialog", name="Settings")
    expect(settings.get_by_role("button", name="Save")).to_be_visible()
    page.keyboard.press("Escape")
    # Nothing the pages drew needed what the policy refuses.
    assert page.evaluate("window.__violations") == []
    assert origins == {one_node.url}, "the page reached beyond its own node"
    assert tab.console.errors == []


def test_settings_keeps_the_keyboard_inside_and_gives_it_back(
    one_node: DaemonProcess, tab: Tab
) -> None:
    page = tab.page
    page.goto(f"{one_node.url}/cluster")
    opener = page.get_by_role("button", name="Settings")
    for _ in range(20):
        page.keyboard.press("Tab")
        if opener.evaluate("el => el === document.activeElement"):
            break
    expect(opener).to_be_focused()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="Settings")
    expect(dialog.get_by_role("button", name="Save")).to_be_visible()
    inside = "() => document.activeElement?.closest('dialog')?.id === 'settings-dialog'"
    controls = dialog.evaluate(
        "d => d.querySelectorAll('a[href],button,input,select,textarea,summary').length"
    )
    # Round the dialog's controls and past its end both ways: focus never leaves it.
    for key in ("Tab", "Shift+Tab"):
        for _ in range(controls + 3):
            page.keyboard.press(key)
            assert page.evaluate(inside), f"{key} left the open dialog"
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(opener).to_be_focused()
