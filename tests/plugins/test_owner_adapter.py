"""The managed-owner adapter across two real daemons: a plugin written only against
``skulk.extensions`` (the ``settings-echo`` fixture), installed from a signed release
and activated through a real manager set up after daemon A started, is served by the
owner runtime on its socket; A lists its capability in ``GET /v1/capabilities`` (no
restart) and answers a call; a frozen owner goes stale (``available: false``, its
capability withdrawn) within the three-second bound and returns; daemon B lists it
through ``?node_id=`` and calls it through the existing remote capability path (an
extension on B calling A); a hanging
call ends at its deadline with ``timeout`` while other calls keep answering; an
explicit disable leaves the node listed with ``available: false`` and withdraws the
capability, and activation brings it back. ``skulk plugins configure`` drives the
configuration and credential routes (the value read at a hidden prompt). B also
loads the fixture in-process by entry point, and lists it under that name."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from skulk_cli.main import app as cli_app
from skulk_host.plugin_manager.connection import ManagerConnection, write_connection
from tests import log_secrets
from tests.daemon.serving import wait_for
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess
from tests.extension_site import install_fixture, install_package, site_env
from tests.plugins.kit import Feed, Publisher
from tests.plugins.manager_process import Manager
from tests.plugins.owner_kit import change, install_owner, publish_owner, settle

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("timing")]

ACME = Publisher("acme")
TOKEN = "owner-adapter-feed-bearer-never-echoed-118"
SECRET = "sk-cli-credential-entered-at-a-hidden-prompt-77"
PLUGIN = "managed.echo"
SETTINGS_ECHO = Path(__file__).resolve().parent / "fixtures" / "settings-echo"
OWNER = {"X-Skulk-Dashboard": "pairing-v1"}


@dataclass
class Cluster:
    a: DaemonProcess
    b: DaemonProcess
    a_id: str
    manager: Manager

    def listing(self, daemon: DaemonProcess, **params: str) -> dict[str, Any]:
        response = daemon.get("/v1/capabilities", params=params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def call(self, capability: str, payload: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        revision = self.listing(self.a)["revisions"][f"{capability}@1.0.0"]
        envelope = {
            "call_id": f"t-{time.monotonic_ns()}",
            "capability_id": capability,
            "version": "1.0.0",
            "descriptor_revision": revision,
            "caller_node": self.a_id,
            "target_node": self.a_id,
            "timeout_seconds": timeout,
            "payload": payload,
        }
        response = httpx.post(f"{self.a.url}/v1/capabilities/call", json=envelope, timeout=60)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def plugin(self) -> dict[str, Any] | None:
        response = self.a.get("/v1/plugins", headers=OWNER)
        assert response.headers["cache-control"].startswith("no-store")
        plugins = response.json()["plugins"]
        return next((p for p in plugins if p["pluginId"] == PLUGIN), None)

    def served(self) -> set[str]:
        return {f"{d['id']}@{d['version']}" for d in self.listing(self.a)["capabilities"]}

    def skulk(self, *args: str, prompt: str | None = None) -> Result:
        return CliRunner().invoke(
            cli_app,
            ["--api-url", self.a.url, "plugins", *args],
            input=prompt,
            env={"COLUMNS": "200"},
            prog_name="skulk",
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[Cluster]:
    log_secrets.register("credential", SECRET)
    root = tmp_path_factory.mktemp("owner-adapter")
    site = root / "site"
    install_fixture("capability-probe", site)
    install_package(SETTINGS_ECHO, site)  # B also loads it in-process, by entry point
    feed = Feed(tls_dir=root / "tls", token=TOKEN)
    publish_owner(feed, ACME, root / "wheel")
    ca = root / "ca.pem"
    ca.write_bytes(feed.ca_pem)
    a = DaemonProcess(root=root / "a", models_dir=shared_models_dir)
    b = DaemonProcess(
        root=root / "b",
        models_dir=shared_models_dir,
        extra_env=site_env(site),
        peers=[a.fabric_address],
    )
    (root / "mgr").mkdir()
    manager = Manager(root / "mgr" / "root", "--tls-ca", str(ca))
    try:
        a.start()
        b.start()
        wait_for(lambda: converged([a, b], 2), "two nodes to converge", timeout=60)
        manager.start()
        log_secrets.watch_log(manager.root.parent / "manager.log")
        # Set up after A serves: found without a restart.
        write_connection(
            a.config_home,
            ManagerConnection(manager_root=str(manager.root), profile_id="b" * 32),
        )
        install_owner(manager, feed, ACME, PLUGIN, TOKEN)
        log_secrets.watch_log(manager.root / "installations" / PLUGIN / "owner.log")
        yield Cluster(a=a, b=b, a_id=node_id(a), manager=manager)
    finally:
        manager.kill()
        a.kill()
        b.kill()
        feed.close()


def test_the_owner_capability_is_listed_and_answers_on_its_node(cluster: Cluster) -> None:
    settle(cluster.served, lambda ids: "settings.echo@1.0.0" in ids, timeout=30)
    assert "settings.hang@1.0.0" in cluster.served()
    listed = settle(cluster.plugin, lambda p: p is not None and p["nodes"][0]["nodeId"] == "echo-1")
    assert listed["available"] is True
    answer = cluster.call("settings.echo", {"text": "hi"})
    assert answer["ok"] and answer["result"] == {"text": "echo: hi"}, answer
    # The fabric's guards still apply: the input schema is checked before the owner.
    bad = cluster.call("settings.echo", {"nope": 1})
    assert bad["error"]["code"] == "invalid_payload", bad


def test_a_second_node_lists_and_calls_it(cluster: Cluster) -> None:
    settle(cluster.served, lambda ids: "settings.echo@1.0.0" in ids, timeout=30)
    remote = cluster.listing(cluster.b, node_id=cluster.a_id)
    assert "settings.echo@1.0.0" in remote["revisions"]
    b_id = node_id(cluster.b)
    revision = cluster.listing(cluster.b)["revisions"]["probe.call@1.0.0"]
    envelope = {
        "call_id": f"t-{time.monotonic_ns()}",
        "capability_id": "probe.call",
        "version": "1.0.0",
        "descriptor_revision": revision,
        "caller_node": b_id,
        "target_node": b_id,
        "timeout_seconds": 30,
        "payload": {
            "node_id": cluster.a_id,
            "capability_id": "settings.echo",
            "version": "1.0.0",
            "payload": {"text": "from b"},
        },
    }
    response = httpx.post(f"{cluster.b.url}/v1/capabilities/call", json=envelope, timeout=60)
    assert response.status_code == 200, response.text
    relayed = response.json()
    assert relayed["ok"], relayed
    assert relayed["result"]["ok"] and relayed["result"]["result"] == {"text": "echo: from b"}


def test_in_process_providers_are_listed_by_their_entry_point(cluster: Cluster) -> None:
    response = cluster.b.get("/v1/plugins", headers=OWNER)
    assert response.status_code == 200, response.text
    plugins = {p["pluginId"]: p for p in response.json()["plugins"]}
    assert plugins["settings-echo"]["available"] is True
    assert [n["nodeId"] for n in plugins["settings-echo"]["nodes"]] == ["echo-1"]


def _owner_pid(cluster: Cluster) -> int:
    installation = str(cluster.manager.root / "installations" / PLUGIN)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in argv]
        if "skulk_host.plugin_owners.owner_host" in text and any(
            a.startswith(installation) for a in text
        ):
            return int(proc.name)
    raise AssertionError("the owner process is not running")


def test_a_frozen_owner_goes_stale_then_returns(cluster: Cluster) -> None:
    settle(cluster.served, lambda ids: "settings.echo@1.0.0" in ids, timeout=30)
    pid = _owner_pid(cluster)
    os.kill(pid, signal.SIGSTOP)
    try:
        stale = settle(cluster.plugin, lambda p: p is not None and not p["available"], timeout=10)
        assert [n["nodeId"] for n in stale["nodes"]] == ["echo-1"]  # still listed
        assert "settings.echo@1.0.0" not in cluster.served()
    finally:
        os.kill(pid, signal.SIGCONT)
    settle(cluster.served, lambda ids: "settings.echo@1.0.0" in ids, timeout=10)
    assert cluster.call("settings.echo", {"text": "back"})["ok"]


def test_a_hanging_call_ends_at_its_deadline_and_others_answer(cluster: Cluster) -> None:
    settle(cluster.served, lambda ids: "settings.hang@1.0.0" in ids, timeout=30)
    with ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        hanging = pool.submit(cluster.call, "settings.hang", {}, 2)
        time.sleep(0.3)
        quick = cluster.call("settings.echo", {"text": "meanwhile"})
        assert quick["ok"] and quick["result"] == {"text": "echo: meanwhile"}
        hung = hanging.result(timeout=30)
        elapsed = time.monotonic() - started
    assert hung["ok"] is False and hung["error"]["code"] == "timeout", hung
    assert 1.8 <= elapsed < 6, elapsed
    # The owner is still healthy and listed afterwards.
    assert "settings.echo@1.0.0" in cluster.served()
    assert cluster.call("settings.echo", {"text": "after"})["ok"]


def test_cli_configure_shows_edits_and_replaces_a_credential(cluster: Cluster) -> None:
    settle(cluster.plugin, lambda p: p is not None and p["nodes"][0]["nodeId"] == "echo-1")
    shown = cluster.skulk("configure", PLUGIN, "echo-1")
    assert shown.exit_code == 0, shown.output
    assert "prefix" in shown.output and '"echo: "' in shown.output
    edited = cluster.skulk("configure", PLUGIN, "echo-1", "--set", "prefix=cli: ", "--json")
    assert edited.exit_code == 0, edited.output
    assert '"prefix": "cli: "' in edited.output
    settle(
        lambda: cluster.call("settings.echo", {"text": "x"}).get("result"),
        lambda r: r == {"text": "cli: x"},
        timeout=10,
    )
    refused = cluster.skulk("configure", PLUGIN, "echo-1", "--set", "prefix=" + "y" * 40)
    assert refused.exit_code == 1 and "prefix" in refused.output
    missing = cluster.skulk("configure", PLUGIN, "echo-9")
    assert missing.exit_code == 1
    replaced = cluster.skulk(
        "configure", PLUGIN, "echo-1", "--credential", "api_key", prompt=SECRET + "\n"
    )
    assert replaced.exit_code == 0, replaced.output
    assert SECRET not in replaced.output and "replaced" in replaced.output
    metadata = cluster.a.get(f"/v1/plugins/{PLUGIN}/nodes/echo-1/credentials", headers=OWNER)
    assert metadata.json()["credentials"][0]["ready"] is True
    assert SECRET not in metadata.text
    for log in (cluster.a.log_text(), cluster.manager.log):
        assert SECRET not in log


def test_a_disabled_owner_stays_listed_unavailable_and_comes_back(cluster: Cluster) -> None:
    settle(cluster.served, lambda ids: "settings.echo@1.0.0" in ids, timeout=30)
    change(cluster.manager, PLUGIN, 10, "disable")
    gone = settle(cluster.plugin, lambda p: p is not None and not p["available"], timeout=15)
    assert [n["nodeId"] for n in gone["nodes"]] == ["echo-1"]  # still listed
    settle(cluster.served, lambda ids: "settings.echo@1.0.0" not in ids, timeout=10)
    remote = cluster.listing(cluster.b, node_id=cluster.a_id)
    assert "settings.echo@1.0.0" not in remote["revisions"]
    digest = cluster.manager(action="get", plugin_id=PLUGIN)["result"]["selected_digest"]
    change(cluster.manager, PLUGIN, 11, "activate", runtime_digest=digest)
    settle(cluster.served, lambda ids: "settings.echo@1.0.0" in ids, timeout=30)
    assert settle(cluster.plugin, lambda p: p is not None and p["available"], timeout=15)


def test_an_owner_stops_when_its_manager_is_killed(cluster: Cluster) -> None:
    # Last in the module: it takes the manager away. A manager killed outright
    # (no chance to stop its owners) must not leave them running: its successor
    # would start a second owner on the same installation.
    pid = _owner_pid(cluster)
    cluster.manager.kill()

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        return stat.split()[2] == "Z"  # exited, not yet reaped

    wait_for(gone, "the orphaned owner to stop", timeout=10)
