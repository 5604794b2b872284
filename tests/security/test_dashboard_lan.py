"""The dashboard from another machine on the LAN (lan.py): the page and its files load
by the node's LAN address, with the same strict headers, and a DNS-rebound name is
refused as on every route."""

from __future__ import annotations

import pytest

from skulk_daemon.api.dashboard import CONTENT_SECURITY_POLICY
from tests.daemon_process import DaemonProcess
from tests.security.lan import PRIVATE_HOST, Lan

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("network")]


def test_a_lan_browser_loads_the_dashboard(network: Lan, node: DaemonProcess) -> None:
    base = f"http://{PRIVATE_HOST}:{node.port}"
    page, script, state = network.requests(
        {"method": "GET", "url": f"{base}/cluster"},
        {"method": "GET", "url": f"{base}/ui/app.js", "headers": {"Origin": base}},
        {"method": "GET", "url": f"{base}/state", "headers": {"Origin": base}},
    )
    assert page["status"] == 200, page
    assert '<script type="module" src="/ui/app.js"></script>' in page["body"]
    assert page["headers"]["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert script["status"] == 200 and "export" in script["body"]
    assert script["headers"]["content-type"] == "text/javascript; charset=utf-8"
    assert state["status"] == 200, state


def test_a_rebound_name_is_refused(network: Lan, node: DaemonProcess) -> None:
    (refused,) = network.requests(
        {
            "method": "GET",
            "url": f"http://{PRIVATE_HOST}:{node.port}/cluster",
            "headers": {"Host": f"attacker.example:{node.port}"},
        }
    )
    assert refused["status"] == 421, refused
