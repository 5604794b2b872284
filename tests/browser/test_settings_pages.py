"""Settings, Devices & pairing, first-run onboarding and Plugins in a real browser,
against one real daemon that is its cluster's operator gateway (relay configured, as
``skulk operator configure-relay`` leaves it) and listens on every address, so the
same page can be opened from this machine and from the machine's other address."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import Tab, screenshot
from tests.daemon.pairing import (
    DEVICES,
    Device,
    gateway_cert,
    host_tool,
    pair,
    relay_provisioning,
    wait_for_listener,
)
from tests.daemon_process import DaemonProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]

DASHBOARD = {"X-Skulk-Dashboard": "pairing-v1"}


def _other_address() -> str | None:
    """This machine's address on its network (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.254", 9))  # no packet is sent for a UDP connect
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    """A fresh node (onboarding not done) that is the operator gateway."""
    root = tmp_path_factory.mktemp("browser-settings")
    daemon = DaemonProcess(root=root, models_dir=shared_models_dir, bind_host="0.0.0.0")
    daemon.data_dir.mkdir(parents=True)
    port = free_port()
    host_tool(
        daemon.data_dir,
        "configure-relay",
        "--provisioning-file",
        str(relay_provisioning(root / "provisioning.json")),
        "--operator-api-port",
        str(port),
        "--cluster-name",
        "Browser",
    )
    daemon.start()
    try:
        wait_for_listener(port, gateway_cert(daemon.data_dir))
        yield daemon
    finally:
        daemon.kill()


def _open_settings(page: Page, url: str) -> Locator:
    # /plugins, not the landing page: the first-run welcome greets the landing page.
    page.goto(f"{url}/plugins")
    expect(page.get_by_role("heading", name="Plugins", level=1)).to_be_visible()
    page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    expect(dialog.get_by_role("button", name="Save")).to_be_visible()
    return dialog


def test_first_run_welcome_asks_about_telemetry_and_not_now_completes_it(
    gateway: DaemonProcess, tab: Tab
) -> None:
    assert gateway.get("/onboarding").json() == {"completed": False}
    page = tab.page
    page.goto(f"{gateway.url}/")
    welcome = page.get_by_role("dialog", name="Welcome to Skulk")
    expect(welcome).to_be_visible()
    welcome.get_by_role("button", name="Next").click()
    step = page.get_by_role("dialog", name="Help make Skulk better?")
    expect(step).to_be_visible()
    screenshot(page, "onboarding")
    step.get_by_role("button", name="Not now").click()
    expect(step).to_be_hidden()
    assert gateway.get("/onboarding").json() == {"completed": True}
    # Telemetry stays off: "Not now" chose nothing.
    assert gateway.get("/config").json()["config"]["telemetry"]["enabled"] is False
    page.reload()
    expect(page.get_by_role("heading", name="Cluster", level=1)).to_be_visible()
    expect(page.get_by_role("dialog", name=re.compile("Welcome|Help make"))).to_have_count(0)
    assert tab.console.errors == []


def test_settings_save_a_field_and_reload_shows_it(gateway: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    dialog = _open_settings(page, gateway.url)
    screenshot(page, "settings")
    node = dialog.get_by_role("group", name="Node", exact=True)
    name = node.get_by_label("Friendly name")
    expect(name).to_be_enabled()
    name.fill("kitchen-mac")
    # Secrets are write-only: their state, never a value.
    expect(dialog.get_by_label("Hugging Face token")).to_have_value("")
    expect(dialog.get_by_label("Hugging Face token")).to_have_accessible_description(
        re.compile("Not set")
    )
    # On this machine the trust keys are editable, and say what they are.
    peers = dialog.get_by_role("group", name="Cluster", exact=True).get_by_label("Peers")
    expect(peers).to_be_enabled()
    dialog.get_by_role("button", name="Save").click()
    expect(dialog.get_by_role("status")).to_have_text(
        "Saved. Restart the node for Friendly name to take effect."
    )
    assert gateway.get("/config").json()["config"]["node"]["friendly_name"] == "kitchen-mac"

    page.reload()
    page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    expect(
        dialog.get_by_role("group", name="Node", exact=True).get_by_label("Friendly name")
    ).to_have_value("kitchen-mac")
    assert tab.console.errors == []


def test_settings_show_the_apis_refusal_beside_the_field(gateway: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    dialog = _open_settings(page, gateway.url)
    before = gateway.get("/config").json()["config"]
    cache = dialog.get_by_label("Prompt cache (MB)")
    cache.fill("-5")
    dialog.get_by_role("button", name="Save").click()
    expect(cache).to_have_attribute("aria-invalid", "true")
    refusal = re.compile("invalid value for 'inference.prompt_cache_mb'")
    expect(cache).to_have_accessible_description(refusal)
    expect(dialog.get_by_role("alert")).to_contain_text("Not saved")
    assert gateway.get("/config").json()["config"] == before
    cache.fill("256")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog.get_by_role("status")).to_have_text("Saved.")
    expect(cache).not_to_have_attribute("aria-invalid", "true")
    assert gateway.get("/config").json()["config"]["inference"]["prompt_cache_mb"] == 256


def test_pair_a_device_from_the_page(gateway: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    dialog = _open_settings(page, gateway.url)
    dialog.get_by_label("Lifetime").select_option(label="7 days")
    dialog.get_by_label("Device limit").fill("3")
    dialog.get_by_role("button", name="Create invitation").click()
    expect(dialog.get_by_role("img", name="Pairing QR code")).to_be_visible()
    expect(dialog.get_by_role("button", name="Download QR code")).to_be_visible()
    listed = gateway.get("/v1/auth/pairing-invitations", headers=DASHBOARD).json()
    [invitation] = [i for i in listed["invitations"] if i["state"] == "active"]
    short = invitation["invitationId"][:8]
    assert invitation["maxPairings"] == 3
    table = dialog.get_by_role("table", name="Pairing invitations")
    row = table.get_by_role("row").filter(has_text=short)
    expect(row).to_contain_text("0 of 3")
    # The bearer pairing code is never on the page as text.
    assert "skulk://" not in page.content()
    dialog.get_by_role("img", name="Pairing QR code").scroll_into_view_if_needed()
    screenshot(page, "pairing")

    # A device pairs (as the app would) and the page lists it; then both are revoked.
    session = host_tool(gateway.data_dir, "pair")["uri"]
    with httpx.Client(base_url=gateway.url, timeout=30.0) as client:
        device = pair(client, str(session), Device(name="Test phone"))
    page.keyboard.press("Escape")  # reopening Settings reads the lists again
    page.get_by_role("button", name="Settings").click()
    devices = dialog.get_by_role("table", name="Paired devices")
    expect(devices).to_contain_text("Test phone")
    # Pairing grants no plugin access; the owner grants it here, explicitly.
    access = devices.get_by_role("group", name="Plugin access for Test phone")
    expect(access.get_by_label("Manage plugins")).not_to_be_checked()
    access.get_by_label("Read plugins").check()
    access.get_by_label("Manage plugins").check()
    access.get_by_role("button", name="Save plugin access for Test phone").click()
    expect(access.get_by_text("Plugin access saved.")).to_be_visible()
    grants = gateway.get("/v1/auth/plugin-grants", headers=DASHBOARD).json()["devices"]
    assert [g["scopes"] for g in grants if g["deviceId"] == device.device_id] == [
        ["plugins:read", "plugins:manage"]
    ]
    devices.get_by_role("button", name="Revoke device Test phone").click()
    expect(devices.get_by_role("row").filter(has_text="Test phone")).to_contain_text("revoked")
    rows = gateway.get(DEVICES, headers=DASHBOARD).json()["devices"]
    assert [d["active"] for d in rows if d["deviceId"] == device.device_id] == [False]

    row.get_by_role("button", name=f"Revoke invitation {short}").click()
    expect(row).to_contain_text("revoked")
    after = gateway.get("/v1/auth/pairing-invitations", headers=DASHBOARD).json()
    assert {i["invitationId"]: i["state"] for i in after["invitations"]}[
        invitation["invitationId"]
    ] == "revoked"
    assert tab.console.errors == []


def test_plugins_lists_the_inventory_and_says_what_to_do(gateway: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{gateway.url}/plugins")
    expect(page.get_by_text("No plugins are installed on this node.")).to_be_visible()
    # No plugin manager is set up here: the managed section says how to set one up.
    expect(page.get_by_role("alert")).to_contain_text("skulk-plugin-service setup")
    screenshot(page, "plugins")
    assert tab.console.errors == []


def test_from_another_machine_trust_keys_are_read_only_and_plugins_say_where(
    gateway: DaemonProcess, tab: Tab
) -> None:
    address = _other_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to open the page from")
    page = tab.page
    url = f"http://{address}:{gateway.port}"
    page.goto(f"{url}/plugins")
    # Plugins are the owner's: the refusal says where to manage them.
    expect(page.get_by_role("alert").first).to_contain_text("localhost")
    page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    peers = dialog.get_by_role("group", name="Cluster", exact=True).get_by_label("Peers")
    expect(peers).to_be_disabled()
    expect(peers).to_have_accessible_description(re.compile("only from this machine"))
    expect(dialog.get_by_label("Friendly name")).to_be_enabled()
    # Pairing is the gateway host's own: the refusal says where to go, and the form
    # that would be refused again is disabled.
    expect(dialog.get_by_role("alert").first).to_contain_text("open the dashboard")
    expect(dialog.get_by_role("button", name="Create invitation")).to_be_disabled()


def test_pairing_on_a_node_that_is_not_the_gateway_says_how_to_set_it_up(
    one_node: DaemonProcess, tab: Tab
) -> None:
    page = tab.page
    dialog = _open_settings(page, one_node.url)
    expect(dialog.get_by_role("alert").first).to_contain_text("configure-relay")
    expect(dialog.get_by_role("button", name="Create invitation")).to_be_disabled()
    expect(dialog.get_by_role("button", name="Save")).to_be_enabled()
    assert tab.console.errors == []


def test_settings_and_plugins_fit_a_phone(gateway: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{gateway.url}/plugins")
    expect(page.get_by_role("heading", name="Plugins", level=1)).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.get_by_role("button", name="Menu").click()
    page.get_by_role("button", name="Settings").click()
    dialog = page.get_by_role("dialog", name="Settings")
    save = dialog.get_by_role("button", name="Save")
    expect(save).to_be_in_viewport()  # the actions stay in reach while the form scrolls
    overflow = dialog.evaluate("d => d.scrollWidth - d.clientWidth")
    assert overflow <= 0, f"the dialog scrolls sideways by {overflow}px"
    screenshot(page, "settings-phone")
    dialog.get_by_label("Device limit").focus()
    page.keyboard.press("Tab")
    expect(dialog.get_by_role("button", name="Create invitation")).to_be_focused()


def test_the_qr_encodes_the_invitation_and_clears_after_five_minutes(
    gateway: DaemonProcess, fresh_tab: Tab
) -> None:
    page = fresh_tab.page
    page.clock.install()  # for good on this page: hence a page of its own
    dialog = _open_settings(page, gateway.url)
    dialog.get_by_label("Device limit").fill("1")
    # The page also polls the invitation list (GET, same URL): wait for the POST's answer.
    with page.expect_response(
        lambda r: r.url.endswith("/v1/auth/pairing-invitations") and r.request.method == "POST"
    ) as answer:
        dialog.get_by_role("button", name="Create invitation").click()
    created = answer.value.json()
    qr = dialog.get_by_role("img", name="Pairing QR code")
    expect(qr).to_be_visible()
    # What is drawn is exactly the pairing code's QR (the vendored encoder, re-run here).
    expected = page.evaluate(
        """async (code) => {
            const { qrcode } = await import("/ui/vendor/qrcode-generator/qrcode.mjs");
            const qr = qrcode(0, "L");
            qr.addData(code);
            qr.make();
            const rows = [];
            for (let r = 0; r < qr.getModuleCount(); r += 1) {
                let row = "";
                for (let c = 0; c < qr.getModuleCount(); c += 1) row += qr.isDark(r, c) ? "1" : "0";
                rows.push(row);
            }
            return rows;
        }""",
        created["pairingCode"],
    )
    drawn = qr.locator("path").get_attribute("d") or ""
    dark = {(int(x) - 4, int(y) - 4) for x, y in re.findall(r"M(\d+) (\d+)", drawn)}
    assert dark == {
        (c, r) for r, row in enumerate(expected) for c, bit in enumerate(row) if bit == "1"
    }
    page.clock.fast_forward("05:01")
    expect(qr).to_have_count(0)
    # Only the display went: the invitation itself stays valid.
    listed = gateway.get("/v1/auth/pairing-invitations", headers=DASHBOARD).json()
    states = {i["invitationId"]: i["state"] for i in listed["invitations"]}
    assert states[created["invitation"]["invitationId"]] == "active"


def test_settings_has_its_own_page_too(gateway: DaemonProcess, tab: Tab) -> None:
    page = tab.page
    page.goto(f"{gateway.url}/settings")
    expect(page.get_by_role("heading", name="Settings", level=1)).to_be_visible()
    form = page.get_by_role("form", name="Node settings")
    expect(
        form.get_by_role("group", name="Telemetry", exact=True).get_by_label("Enabled")
    ).not_to_be_checked()
    expect(page.get_by_role("heading", name="Devices & pairing")).to_be_visible()
    assert tab.console.errors == []


def test_choosing_telemetry_in_the_welcome_turns_it_on(gateway: DaemonProcess, tab: Tab) -> None:
    # The same node as new again: its onboarding marker is a node-local file.
    (gateway.data_dir / "onboarding_completed").unlink(missing_ok=True)
    assert gateway.get("/onboarding").json() == {"completed": False}
    page = tab.page
    page.goto(f"{gateway.url}/cluster")
    page.get_by_role("dialog", name="Welcome to Skulk").get_by_role("button", name="Next").click()
    page.get_by_role("button", name="Share telemetry").click()
    expect(page.get_by_role("dialog", name="Help make Skulk better?")).to_be_hidden()
    assert gateway.get("/onboarding").json() == {"completed": True}
    config = gateway.get("/config").json()["config"]
    assert config["telemetry"]["enabled"] is True
    with httpx.Client(base_url=gateway.url, timeout=30.0) as client:
        off = {**config, "telemetry": {"enabled": False}}
        assert client.put("/config", json=off).status_code == 200
    assert tab.console.errors == []
