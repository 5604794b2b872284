"""`skulk plugins list|show|enable|disable` against a real daemon process whose plugin
routes reach a real manager (found through the connection record written after the
daemon started), with a release staged from the kit's loopback feed; and the
inventory when the manager is down (still listed, ``available: false``)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from skulk_cli.main import app
from skulk_host.plugin_manager.connection import ManagerConnection, write_connection
from tests.daemon_process import DaemonProcess
from tests.plugins.kit import Feed, Publisher, build_wheel, release_document, trust_document
from tests.plugins.manager_process import Manager

pytestmark = pytest.mark.slow

ACME = Publisher("acme")
PLUGIN = "managed.cli"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Node:
    daemon: DaemonProcess
    manager: Manager
    digest: str

    def skulk(self, *args: str) -> Result:
        return CliRunner().invoke(
            app,
            ["--api-url", self.daemon.url, "plugins", *args],
            env={"COLUMNS": "200"},
            prog_name="skulk",
        )


def _ok(answer: dict[str, Any]) -> Any:
    assert answer["ok"], answer
    return answer["result"]


def _settled(read: Any, states: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while (current := read()) is None or current["state"] not in states:
        assert time.monotonic() < deadline, current
        time.sleep(0.2)
    return dict(current)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[Node]:
    base = tmp_path_factory.mktemp("plugins-cli")
    feed = Feed(tls_dir=base / "tls")
    wheel = build_wheel(base / "wheel")
    feed.publish("release.json", ACME.sign(release_document(ACME, [wheel])))
    feed.publish_wheel(wheel)
    daemon = DaemonProcess(root=base / "node", models_dir=shared_models_dir).start()
    (base / "ca.pem").write_bytes(feed.ca_pem)
    manager = Manager(base / "root", "--tls-ca", str(base / "ca.pem")).start()
    try:
        write_connection(
            daemon.config_home,
            ManagerConnection(manager_root=str(manager.root), profile_id="a" * 32),
        )
        _ok(manager(action="register", plugin_id=PLUGIN))
        source = {"expected_revision": 0, "base_url": feed.base_url, "trust": trust_document(ACME)}
        _ok(manager(action="configure_source", plugin_id=PLUGIN, request=source))
        digest = _ok(manager(action="inspect_release", plugin_id=PLUGIN))["runtime_digest"]
        install = {
            "operation_id": "1" * 32,
            "runtime_digest": digest,
            "expected_source_revision": 1,
        }
        _ok(manager(action="install", plugin_id=PLUGIN, request=install))
        staged = _settled(
            lambda: _ok(manager(action="install_status", plugin_id=PLUGIN))["operation"],
            ("staged", "recovery_required"),
        )
        assert staged["state"] == "staged", staged
        select = {
            "operation_id": "2" * 32,
            "action": "select",
            "expected_revision": 0,
            "runtime_digest": digest,
        }
        _ok(manager(action="submit", plugin_id=PLUGIN, request=select))
        _settled(
            lambda: _ok(manager(action="operation", plugin_id=PLUGIN, operation_id="2" * 32)),
            ("complete", "failed"),
        )
        yield Node(daemon=daemon, manager=manager, digest=digest)
    finally:
        manager.kill()
        daemon.kill()
        feed.close()


def _listed(node: Node) -> list[dict[str, Any]]:
    result = node.skulk("list", "--json")
    assert result.exit_code == 0, result.output
    plugins: list[dict[str, Any]] = json.loads(result.stdout)["plugins"]
    return plugins


def test_list_show_enable_disable(node: Node) -> None:
    [plugin] = _listed(node)
    assert (plugin["pluginId"], plugin["available"], plugin["nodes"][0]["status"]) == (
        PLUGIN,
        True,
        "disabled",
    )
    table = node.skulk("list")
    assert table.exit_code == 0 and PLUGIN in table.stdout and "disabled" in table.stdout

    enabled = node.skulk("enable", PLUGIN)
    assert enabled.exit_code == 0, enabled.output
    assert f"{PLUGIN}: enabled." in ANSI.sub("", enabled.stdout)
    assert _listed(node)[0]["nodes"][0]["status"] == "enabled"
    shown = node.skulk("show", PLUGIN)
    assert shown.exit_code == 0 and node.digest in shown.stdout

    disabled = node.skulk("disable", PLUGIN, "--json")
    assert disabled.exit_code == 0, disabled.output
    assert json.loads(disabled.stdout)["state"] == "complete"
    assert _listed(node)[0]["nodes"][0]["status"] == "disabled"

    unknown = node.skulk("show", "managed.nothing")
    assert unknown.exit_code == 1 and "No installation managed.nothing" in unknown.output


def test_a_stopped_manager_leaves_plugins_listed_unavailable(node: Node) -> None:
    node.manager.kill()
    [plugin] = _listed(node)
    assert (plugin["pluginId"], plugin["available"]) == (PLUGIN, False)
    down = node.skulk("show", PLUGIN)
    assert down.exit_code == 1 and "does not answer" in ANSI.sub("", down.output)
