"""The bundle archive's fixed shims through a real manager, the real app and the real
terminal commands: a signed release of one library wheel and a bundle archive carrying
``__owner__.py`` (its provider in the bundle, importing the wheel), ``__setup__.py`` and
``__manage__.py`` is inspected, downloaded from the loopback HTTPS feed, staged and
activated. The manager supervises the bundle's owner and the app lists its capability
in ``GET /v1/capabilities`` and answers a call through ``POST /v1/capabilities/call``;
``skulk-plugin-service setup-plugin`` and ``manage-plugin`` run the bundle's shims with
the terminal's arguments, stdin and exit status. A shim changed after staging is
refused: the terminal commands run nothing, and the supervisor does not start the owner
again once it exits (``seal_mismatch``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from skulk_cli.plugin_service.setup import SetupRecord, write_record
from skulk_host.plugin_manager.connection import ManagerConnection, write_connection
from tests.api.in_process import AppNode
from tests.plugins.bundle_kit import bundle_release, fixture_bundle, library_wheel
from tests.plugins.kit import Feed, Publisher
from tests.plugins.manager_process import REPO_ROOT, Manager
from tests.plugins.owner_kit import install_owner, ok, settle
from tests.plugins.test_service_commands import NONROOT_PYTHON

ACME = Publisher("acme")
TOKEN = "bundle-launchers-feed-bearer-73"
PLUGIN = "managed.bundle"
PROFILE = "f" * 32
ECHO = "bundle.echo@1.0.0"


@dataclass
class Bundled:
    app: AppNode
    manager: Manager
    digest: str
    config_home: Path

    def command(self, *args: str) -> list[str]:
        home = ["--config-home", str(self.config_home)]
        return [sys.executable, "-m", "skulk_cli.plugin_service", args[0], *home, *args[1:]]

    def run(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            cwd=REPO_ROOT,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def listing(self) -> dict[str, Any]:
        response = self.app.get("/v1/capabilities")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def call(self, text: str) -> dict[str, Any]:
        node: str = self.app.get("/node_id").json()
        envelope = {
            "call_id": f"b-{time.monotonic_ns()}",
            "capability_id": "bundle.echo",
            "version": "1.0.0",
            "descriptor_revision": self.listing()["revisions"][ECHO],
            "caller_node": node,
            "target_node": node,
            "timeout_seconds": 30,
            "payload": {"text": text},
        }
        response = self.app.post("/v1/capabilities/call", json=envelope)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def service(self) -> dict[str, Any]:
        return dict(ok(self.manager(action="get", plugin_id=PLUGIN))["service"])

    def served(self) -> set[str]:
        return {f"{d['id']}@{d['version']}" for d in self.listing()["capabilities"]}

    @property
    def bundle(self) -> Path:
        root = self.manager.root / "installations" / PLUGIN / "generations"
        return root / self.digest / "bundle"


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bundled]:
    base = tmp_path_factory.mktemp("bl")
    feed = Feed(tls_dir=base / "tls", token=TOKEN)
    wheel = library_wheel(base / "art")
    archive = fixture_bundle(base / "art")
    feed.publish("release.json", ACME.sign(bundle_release(ACME, [wheel], archive)))
    feed.publish_wheel(wheel)
    feed.publish(archive.path.name, archive.path.read_bytes())
    (base / "ca.pem").write_bytes(feed.ca_pem)
    service = base / "svc"
    service.mkdir(mode=0o700)
    manager = Manager(service / "mgr", "--tls-ca", str(base / "ca.pem")).start()
    config_home = base / "config"
    python = base / "nonroot-python"
    python.write_text(NONROOT_PYTHON.format(python=sys.executable))
    python.chmod(0o700)
    write_connection(
        config_home, ManagerConnection(manager_root=str(manager.root), profile_id=PROFILE)
    )
    write_record(
        service,
        SetupRecord(
            operation_id="e" * 32,
            profile_id=PROFILE,
            phase="ready",
            config_home=str(config_home),
            python=str(python) if os.geteuid() == 0 else sys.executable,
            updated_at=int(time.time()),
        ),
    )
    try:
        with AppNode(root=base / "node", models_dir=base / "models") as app:
            write_connection(
                app.config_home,
                ManagerConnection(manager_root=str(manager.root), profile_id="a" * 32),
            )
            digest = install_owner(manager, feed, ACME, PLUGIN, TOKEN)
            yield Bundled(app=app, manager=manager, digest=digest, config_home=config_home)
    finally:
        manager.kill()
        feed.close()


def test_the_bundle_owner_is_supervised_and_its_capability_answers(bundled: Bundled) -> None:
    settle(bundled.served, lambda ids: ECHO in ids, timeout=60)
    answer = bundled.call("hi")
    assert answer["ok"], answer
    assert answer["result"]["text"] == "bundled: hi"  # the bundle's provider, the wheel's prefix
    assert bundled.service()["status"] == "running"
    assert sorted(p.name for p in bundled.bundle.iterdir())[:3] == [
        "__manage__.py",
        "__owner__.py",
        "__setup__.py",
    ]


def test_manage_plugin_runs_the_bundle_manage_shim(bundled: Bundled) -> None:
    done = bundled.run("manage-plugin", PLUGIN, "--", "status", "--verbose", stdin="hello\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"argv": ["status", "--verbose"], "line": "bundled: hello"}


def test_setup_plugin_runs_the_bundle_setup_shim(bundled: Bundled) -> None:
    done = bundled.run("setup-plugin", PLUGIN, "--", "region=eu")
    assert done.returncode == 3, done.stderr  # the shim's own status
    assert done.stdout.strip() == 'setup ["region=eu"]'


def test_a_shim_changed_after_staging_never_starts(bundled: Bundled) -> None:
    settle(bundled.served, lambda ids: ECHO in ids, timeout=60)
    pid = int(bundled.call("pid")["result"]["pid"])
    shim = bundled.bundle / "__owner__.py"
    original = shim.read_bytes()
    shim.write_bytes(original + b"\nprint('tampered')\n")
    try:
        refused = bundled.run("manage-plugin", PLUGIN, stdin="x\n")
        assert refused.returncode == 1 and refused.stdout == "", refused.stdout
        assert "staged bundle no longer matches its seal" in refused.stderr
        # The running owner exits; the supervisor's next lifetime is refused by the seal.
        os.kill(pid, signal.SIGKILL)
        observed = settle(
            bundled.service,
            lambda s: s["error_code"] == "seal_mismatch",
            timeout=30,
        )
        assert observed["status"] == "failed" and observed["lifetimes"] >= 2
        log = (bundled.manager.root / "installations" / PLUGIN / "owner.log").read_text()
        assert "tampered" not in log
    finally:
        shim.write_bytes(original)
    assert bundled.run("manage-plugin", PLUGIN, stdin="x\n").returncode == 0
