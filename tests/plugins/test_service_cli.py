"""``skulk-plugin-service`` end to end, as an owner runs it: ``setup`` in a temporary
root (no service manager runs here, so its honest fallback), the foreground manager it
offers, the guided ``install-plugin`` on a pseudo-terminal against the kit's loopback
HTTPS feed (publisher trust, hidden bearer input, review, separate download and
activation consents, the printed resume command), then ``manage``, ``uninstall`` and
``purge-plugin``. The feed bearer never appears in any output, log or retained record
outside its protected credential file."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from skulk_cli.plugin_service import registration
from skulk_core.plugins.canonical import canonical_json
from skulk_host.plugin_manager.client import call
from tests.plugins.kit import (
    DAY,
    NOW,
    Feed,
    Publisher,
    Wheel,
    build_wheel,
    catalog_document,
    catalog_entry,
    release_document,
    trust_document,
)
from tests.plugins.manager_process import wait_until_answering
from tests.plugins.runtime_copies import SessionRuntime
from tests.plugins.terminal import Terminal

pytestmark = pytest.mark.xdist_group("plugin_runtime")

REPO_ROOT = Path(__file__).resolve().parents[2]
ACME = Publisher("acme")
TOKEN = "service-cli-feed-bearer-that-must-never-leak-5150"


@dataclass
class Host:
    base: Path
    env: dict[str, str]
    feed: Feed
    wheel: Wheel
    outputs: list[str]
    installed: list[str]
    python: Path
    """The interpreter the session's staging ran setup from: setup here reuses its copy."""

    @property
    def root(self) -> Path:
        return self.base / "service"

    @property
    def config_home(self) -> Path:
        return self.base / "config"

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.python), "-m", "skulk_cli.plugin_service", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=REPO_ROOT,
            timeout=120,
            check=False,
        )
        self.outputs.append(done.stdout + done.stderr)
        return done

    def manage(self, **request: Any) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(self.cli("manage", stdin=json.dumps(request)).stdout)
        return answer

    def observe(self, **request: Any) -> dict[str, Any]:
        """The manager's answer over its socket, for what a test reads between the steps
        under test: a ``manage`` run (which the steps cover) costs a CLI start each."""
        return call(self.root / "manager", request)

    def terminal(self, *args: str) -> Terminal:
        return Terminal(
            [str(self.python), "-m", "skulk_cli.plugin_service", *args], self.env, REPO_ROOT
        )


@pytest.fixture(scope="module")
def host(
    tmp_path_factory: pytest.TempPathFactory, session_runtime: SessionRuntime
) -> Iterator[Host]:
    base = tmp_path_factory.mktemp("service-cli")
    # The session's staging, copied as hard links: setup here verifies and reuses it.
    session_runtime.copy_into(base / "service")
    feed = Feed(tls_dir=base / "tls", token=TOKEN)
    wheel = build_wheel(base / "wheel", version="1.0.1")
    feed.publish("release.json", ACME.sign(release_document(ACME, [wheel], version="1.0.1")))
    feed.publish_wheel(wheel)
    env = {
        **os.environ,
        "HOME": str(base / "home"),
        "SKULK_CONFIG_HOME": str(base / "config"),
        "SKULK_PLUGIN_SERVICE_ROOT": str(base / "service"),
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }
    (base / "home").mkdir()
    yield Host(
        base=base,
        env=env,
        feed=feed,
        wheel=wheel,
        outputs=[],
        installed=[],
        python=session_runtime.python,
    )
    feed.close()
    shutil.rmtree(base / "service" / "runtimes", ignore_errors=True)


@pytest.fixture(scope="module")
def manager(host: Host) -> Iterator[subprocess.Popen[bytes]]:
    ca = host.base / "feed-ca.pem"
    ca.write_bytes(host.feed.ca_pem)
    done = host.cli("setup", "--tls-ca", str(ca))
    assert done.returncode == 0, done.stdout + done.stderr
    with (host.base / "manager.log").open("ab") as log:
        process = subprocess.Popen(
            [str(host.python), "-m", "skulk_cli.plugin_service", "serve"],
            env=host.env,
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    wait_until_answering(host.root / "manager", process, host.base / "manager.log")
    status = host.cli("status")
    assert status.returncode == 0, status.stdout + status.stderr
    yield process
    process.terminate()
    process.wait(timeout=60)


def test_setup_says_plainly_that_no_service_manager_runs(host: Host) -> None:
    assert registration.detect().kind == "none"  # this host: no running systemd
    first = host.cli("setup")
    assert first.returncode == 0, first.stderr
    assert "not registered as a service" in first.stdout
    assert "skulk-plugin-service serve" in first.stdout
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert (summary["phase"], summary["service"], summary["runtime"]) == (
        "selected",
        "none",
        "staged",
    )
    connection = host.config_home / "managed-service" / "connection.json"
    assert stat.S_IMODE(connection.stat().st_mode) == 0o600
    assert stat.S_IMODE(connection.parent.stat().st_mode) == 0o700
    assert json.loads(connection.read_text())["manager_root"] == str(host.root / "manager")
    # Status is read-only and honest: nothing answers yet.
    status = host.cli("status")
    assert status.returncode == 1
    body = json.loads(status.stdout)
    assert (body["phase"], body["management_available"], body["error_code"]) == (
        "selected",
        False,
        "service_unavailable",
    )
    # A rerun keeps the generated ids; another configuration home is not adopted.
    again = json.loads(host.cli("setup").stdout.strip().splitlines()[-1])
    assert again["operation_id"] == summary["operation_id"]
    other = host.cli("setup", "--config-home", str(host.base / "other-config"))
    assert other.returncode == 1 and "is bound to the Skulk configuration" in other.stderr
    # Before setup, a command says what to run.
    bare = subprocess.run(
        [str(host.python), "-m", "skulk_cli.plugin_service", "catalog"],
        env={**host.env, "SKULK_CONFIG_HOME": str(host.base / "unset")},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    assert bare.returncode == 1 and "run skulk-plugin-service setup" in bare.stderr


def _answer_source(terminal: Terminal, host: Host) -> None:
    expiry = dt.datetime.fromtimestamp(NOW + 30 * DAY, dt.UTC).isoformat()
    for prompt, answer in (
        ("HTTPS release directory", host.feed.base_url),
        ("Metadata filename", ""),
        ("Publisher id", ACME.publisher_id),
        ("public key", ACME.public_hex),
        ("Trust expiry", expiry),
        ("Trust this publisher", "y"),
        ("Feed bearer token", TOKEN),
    ):
        terminal.expect(prompt)
        terminal.send(answer)


def test_guided_install_on_a_terminal_with_separate_consents_and_resume(
    host: Host, manager: subprocess.Popen[bytes]
) -> None:
    first = host.terminal("install-plugin")
    first.expect("resume with: skulk-plugin-service install-plugin ")
    plugin_id = first.expect("\n").strip()
    assert re.fullmatch(r"managed\.plugin-[0-9a-f]{8}", plugin_id)
    _answer_source(first, host)
    review = first.expect("Download and stage this release")
    for fact in ("acme", "acme.tiny 1.0.1", str(host.wheel.size), "network:loopback"):
        assert fact in review, review
    first.send("y")
    first.expect("Release staged.")
    first.expect("Accept these permissions and start the plugin owner?")
    first.send("n")  # the second consent is separate: decline it
    first.expect("staged but not activated")
    assert first.finish() == 1
    assert TOKEN not in first.transcript  # hidden input: never echoed
    wheel_fetches = [p for p, _ in host.feed.requests if p.endswith(".whl")]
    assert len(wheel_fetches) == 1

    observed = host.manage(action="get", plugin_id=plugin_id)["result"]
    assert (observed["enabled"], observed["selected_digest"]) == (False, None)
    staged = host.observe(action="install_status", plugin_id=plugin_id)["result"]["operation"]
    assert staged["state"] == "staged"
    assert staged["request"]["runtime_digest"] in review  # the exact digest was reviewed

    # The printed resume command: no source prompts, no second download.
    resumed = host.terminal("install-plugin", plugin_id)
    resumed.expect("This release is already staged.")
    resumed.expect("Accept these permissions")
    resumed.send("y")
    resumed.expect(f"{plugin_id} is activated.")
    assert resumed.finish() == 0
    assert "HTTPS release directory" not in resumed.transcript
    assert [p for p, _ in host.feed.requests if p.endswith(".whl")] == wheel_fetches
    host.outputs += [first.transcript, resumed.transcript]
    host.installed.append(plugin_id)

    observed = host.observe(action="get", plugin_id=plugin_id)["result"]
    assert observed["enabled"] is True and observed["selected_digest"] is not None
    assert observed["release"]["bundle_id"] == "acme.tiny"
    # A third run observes; it changes nothing.
    third = host.terminal("install-plugin", plugin_id)
    third.expect("already runs this release")
    assert third.finish() == 0
    assert host.observe(action="get", plugin_id=plugin_id)["result"]["selection_revision"] == 1


def test_an_unreachable_feed_is_said_before_the_trust_questions_and_leaves_nothing(
    host: Host, manager: subprocess.Popen[bytes]
) -> None:
    def installed() -> list[str]:
        listed = host.observe(action="list")["result"]["installations"]
        return sorted(i["plugin_id"] for i in listed)

    before = installed()
    with socket.socket() as probe:  # nothing listens there
        probe.bind(("127.0.0.1", 0))
        dead = f"https://127.0.0.1:{probe.getsockname()[1]}/releases/"
    terminal = host.terminal("install-plugin")
    terminal.expect("resume with: skulk-plugin-service install-plugin ")
    plugin_id = terminal.expect("\n").strip()
    terminal.expect("HTTPS release directory")
    terminal.send(dead)
    terminal.expect("Metadata filename")
    terminal.send("")
    terminal.expect("Nothing was installed.")
    assert terminal.finish() == 1
    assert f"The release directory {dead} cannot be reached" in " ".join(
        terminal.transcript.split()
    )
    assert "Publisher id" not in terminal.transcript  # no trust question was asked
    assert installed() == before  # nothing was registered
    assert plugin_id not in before


def test_install_from_the_signed_catalog(host: Host, manager: subprocess.Popen[bytes]) -> None:
    refused = host.cli("catalog")
    assert refused.returncode == 1 and "No catalog is configured" in refused.stderr
    document = release_document(ACME, [host.wheel], version="1.0.1")
    digest = hashlib.sha256(canonical_json(document)).hexdigest()
    entry = catalog_entry(document, digest, host.feed.base_url)
    host.feed.publish("catalog.json", ACME.sign(catalog_document(ACME, [entry], revision=4)))
    request = {
        "expected_revision": 0,
        "base_url": host.feed.base_url,
        "trust": trust_document(ACME),
        "token": TOKEN,
    }
    configured = host.manage(action="configure_catalog", request=request)
    assert configured["ok"] and configured["result"]["credential_ready"] is True, configured
    review = json.loads(host.cli("catalog").stdout)
    assert [(e["bundle_id"], e["release_digest"]) for e in review["entries"]] == [
        ("acme.tiny", digest)
    ]

    terminal = host.terminal("install-plugin", "--from-catalog", "acme.tiny")
    terminal.expect("resume with: skulk-plugin-service install-plugin ")
    plugin_id = terminal.expect("\n").strip()
    listing = terminal.expect("Bind an installation to this listing's feed and publisher?")
    assert digest in listing and "network:loopback" in listing
    terminal.send("y")
    terminal.expect("Verified release")
    terminal.expect("Download and stage this release")
    terminal.send("y")
    terminal.expect("Accept these permissions")
    terminal.send("y")
    terminal.expect(f"{plugin_id} is activated.")
    assert terminal.finish() == 0
    assert "HTTPS release directory" not in terminal.transcript  # bound from the listing
    host.outputs.append(terminal.transcript)
    observed = host.observe(action="get", plugin_id=plugin_id)["result"]
    assert (observed["enabled"], observed["selected_digest"]) == (True, digest)


def test_uninstall_keeps_records_and_purge_removes_them(
    host: Host, manager: subprocess.Popen[bytes]
) -> None:
    plugin_id = host.installed[0]
    live = host.cli("purge-plugin", plugin_id, "--yes")
    assert live.returncode == 1 and "uninstall it before purging" in live.stderr
    declined = host.cli("uninstall", plugin_id, stdin="n\n")
    assert declined.returncode == 1 and "Nothing was changed" in declined.stderr
    done = host.cli("uninstall", plugin_id, "--yes")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "complete"
    observed = host.observe(action="get", plugin_id=plugin_id)["result"]
    assert (observed["uninstalled"], observed["enabled"]) == (True, False)
    installation = host.root / "manager" / "installations" / plugin_id
    assert (installation / "source.json").is_file()  # cleanup material retained
    purged = host.cli("purge-plugin", plugin_id, "--yes")
    assert purged.returncode == 0, purged.stderr
    assert json.loads(purged.stdout) == {"plugin_id": plugin_id, "purged": True}
    assert not installation.exists()
    gone = host.manage(action="get", plugin_id=plugin_id)
    assert gone["ok"] is False and "No installation" in gone["error"]["message"]


def test_the_bearer_never_leaves_its_protected_file(
    host: Host, manager: subprocess.Popen[bytes]
) -> None:
    assert host.outputs and all(TOKEN not in output for output in host.outputs)
    assert TOKEN not in (host.base / "manager.log").read_text()
    for path in host.root.rglob("*"):
        if path.is_file() and "credentials" not in path.parts:
            assert TOKEN.encode() not in path.read_bytes(), path
