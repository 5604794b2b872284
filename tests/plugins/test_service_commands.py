"""``skulk-plugin-service setup-plugin`` and ``manage-plugin`` against a real manager:
a signed release whose wheel declares ``owner``, ``manage`` and ``setup`` under
``skulk.capability_runtime`` is inspected, staged offline from a loopback HTTPS feed and
selected with its owner stopped (a disabled selection is allowed), then the terminal
commands run as real processes.

Proves: the declared entry runs with the caller's arguments after ``--`` and the
terminal's stdin/stdout, its exit status passes through; the installer fence is held
for as long as the command runs (the flock survives both process replacements) and is
released when it exits; refusals (exit 1, nothing of the plugin run) for an unknown
installation, a foreign local profile binding, more than 128 arguments, a tampered
staged runtime (the seal), a missing or doubly declared entry point, root (as root); in
the launcher: a fence held past the wait, a selection changed while waiting, a pending
selection change, a lost retained release record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from skulk_cli.plugin_service.setup import SetupRecord, write_record
from skulk_core.plugins.errors import PluginRefusal
from skulk_host.plugin_manager.connection import ManagerConnection, write_connection
from skulk_host.plugin_manager.local_command import declared_entry, prepare
from skulk_host.plugin_manager.protocol import LifecycleOperation, LifecycleRequest
from skulk_host.plugin_manager.store import Store
from tests.plugins.kit import Feed, Publisher, build_wheel, release_document, trust_document
from tests.plugins.manager_process import REPO_ROOT, Manager
from tests.plugins.owner_kit import change, ok, settle

ACME = Publisher("acme")
TOKEN = "service-commands-feed-bearer-31"
PLUGIN = "managed.tools"
PROFILE = "c" * 32
NONROOT_PYTHON = """#!{python}
# The service interpreter for these tests: they run as root here, and the launcher
# refuses root (test_root_is_refused proves it); this one reports a nonroot euid to the
# launcher and runs the fixed runtime-manager module exactly as the interpreter would.
import os, runpy, sys
os.geteuid = lambda: 4242
assert sys.argv[1] == "-m"
module = sys.argv[2]
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
TOOLS = b'''"""Plugin-owned terminal commands (test fixture)."""

import json
import sys


def manage():
    line = sys.stdin.readline().strip()
    print(json.dumps({"argv": sys.argv[1:], "line": line}), flush=True)
    return 0


def setup():
    print("setup " + json.dumps(sys.argv[1:]), flush=True)
    sys.stdin.readline()  # the test releases it
    return 3
'''


@dataclass
class Installed:
    manager: Manager
    config_home: Path
    digest: str
    record: SetupRecord

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

    def command(self, *args: str) -> list[str]:
        home = ["--config-home", str(self.config_home)]
        return [sys.executable, "-m", "skulk_cli.plugin_service", args[0], *home, *args[1:]]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("svc-cmd")
    feed = Feed(tls_dir=base / "tls", token=TOKEN)
    info = "tiny_tools-1.0.0.dist-info"
    wheel = build_wheel(
        base / "wheel",
        dist="tiny_tools",
        extra_members={
            "tiny_tools/tools.py": TOOLS,
            f"{info}/entry_points.txt": (
                b"[skulk.capability_runtime]\nowner = tiny_tools.owner:main\n"
                b"manage = tiny_tools.tools:manage\nsetup = tiny_tools.tools:setup\n"
            ),
        },
    )
    feed.publish("release.json", ACME.sign(release_document(ACME, [wheel], bundle_id="tools")))
    feed.publish_wheel(wheel)
    (base / "ca.pem").write_bytes(feed.ca_pem)
    service = base / "service"
    service.mkdir(mode=0o700)
    manager = Manager(service / "manager", "--tls-ca", str(base / "ca.pem")).start()
    config_home = base / "config"
    python = base / "nonroot-python"
    python.write_text(NONROOT_PYTHON.format(python=sys.executable))
    python.chmod(0o700)
    write_connection(
        config_home, ManagerConnection(manager_root=str(manager.root), profile_id=PROFILE)
    )
    record = SetupRecord(
        operation_id="d" * 32,
        profile_id=PROFILE,
        phase="ready",
        config_home=str(config_home),
        python=str(python) if os.geteuid() == 0 else sys.executable,
        updated_at=int(time.time()),
    )
    write_record(service, record)
    ok(manager(action="register", plugin_id=PLUGIN))
    source = {
        "expected_revision": 0,
        "base_url": feed.base_url,
        "trust": trust_document(ACME),
        "token": TOKEN,
    }
    ok(manager(action="configure_source", plugin_id=PLUGIN, request=source))
    digest = str(ok(manager(action="inspect_release", plugin_id=PLUGIN))["runtime_digest"])
    install = {"operation_id": "1" * 32, "runtime_digest": digest, "expected_source_revision": 1}
    ok(manager(action="install", plugin_id=PLUGIN, request=install))
    staged = settle(
        lambda: ok(manager(action="install_status", plugin_id=PLUGIN))["operation"],
        lambda op: op["state"] in ("staged", "recovery_required"),
    )
    assert staged["state"] == "staged", staged
    change(manager, PLUGIN, 2, "select", runtime_digest=digest, accept_permissions=True)
    yield Installed(manager, config_home, digest, record)
    manager.kill()
    feed.close()


def test_manage_plugin_runs_the_declared_entry(installed: Installed) -> None:
    done = installed.run("manage-plugin", PLUGIN, "--", "status", "--verbose", stdin="hello\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"argv": ["status", "--verbose"], "line": "hello"}


def test_setup_plugin_holds_the_fence_until_it_exits(installed: Installed) -> None:
    store = Store(installed.manager.root)
    with store.fence(PLUGIN, wait=0) as free:
        assert free
    with subprocess.Popen(
        installed.command("setup-plugin", PLUGIN, "--", "region=eu"),
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline().strip() == 'setup ["region=eu"]'
        with store.fence(PLUGIN, wait=0) as free:
            assert not free  # held by the running setup (inherited through both execs)
        process.stdin.write("\n")
        process.stdin.flush()
        assert process.wait(30) == 3  # the plugin's own status
    with store.fence(PLUGIN, wait=0) as free:
        assert free


@pytest.mark.skipif(os.geteuid() != 0, reason="the root refusal is observed as root")
def test_root_is_refused(installed: Installed) -> None:
    service = installed.manager.root.parent
    write_record(service, msgspec.structs.replace(installed.record, python=sys.executable))
    try:
        done = installed.run("manage-plugin", PLUGIN, stdin="x\n")
    finally:
        write_record(service, installed.record)
    assert done.returncode == 1 and done.stdout == ""
    assert "nonroot Skulk owner, not as root" in done.stderr


def test_refusals_run_nothing(installed: Installed, tmp_path: Path) -> None:
    unknown = installed.run("manage-plugin", "managed.absent")
    assert unknown.returncode == 1 and "No managed installation" in unknown.stderr
    many = installed.run("manage-plugin", PLUGIN, "--", *(["x"] * 129))
    assert many.returncode == 1 and "At most 128" in many.stderr and many.stdout == ""

    foreign = ManagerConnection(manager_root=str(installed.manager.root), profile_id="e" * 32)
    write_connection(installed.config_home, foreign)
    try:
        bound = installed.run("manage-plugin", PLUGIN, stdin="x\n")
        assert bound.returncode == 1 and "local service profile" in bound.stderr
        assert bound.stdout == ""
    finally:
        write_connection(
            installed.config_home,
            ManagerConnection(manager_root=str(installed.manager.root), profile_id=PROFILE),
        )

    runtime = installed.manager.root / "installations" / PLUGIN / "generations"
    tools = next((runtime / installed.digest / "runtime").glob("lib/*/site-packages/tiny_tools"))
    original = (tools / "tools.py").read_bytes()
    (tools / "tools.py").write_bytes(original + b"\nprint('tampered')\n")
    try:
        tampered = installed.run("manage-plugin", PLUGIN, stdin="x\n")
        assert tampered.returncode == 1 and tampered.stdout == "", tampered.stdout
        assert "no longer matches its seal" in tampered.stderr
    finally:
        (tools / "tools.py").write_bytes(original)
    assert installed.run("manage-plugin", PLUGIN, stdin="x\n").returncode == 0

    site = tmp_path / "site"
    (site / "a-1.dist-info").mkdir(parents=True)
    (site / "a-1.dist-info" / "entry_points.txt").write_text(
        "[skulk.capability_runtime]\nowner = a.owner:main\n"
    )
    with pytest.raises(PluginRefusal, match="declares no manage entry"):
        declared_entry(site, "manage")
    (site / "b-1.dist-info").mkdir()
    for name in ("a", "b"):
        (site / f"{name}-1.dist-info" / "entry_points.txt").write_text(
            f"[skulk.capability_runtime]\nsetup = {name}.tools:setup\n"
        )
    with pytest.raises(PluginRefusal, match="badly"):
        declared_entry(site, "setup")


def test_the_fence_wait_and_the_selection_are_checked_again(
    installed: Installed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 4242)  # the launcher's nonroot check
    store = Store(installed.manager.root)
    command, fence = prepare(installed.manager.root, PLUGIN, "manage", ["status"])
    os.close(fence)
    assert command[-2:] == ["tiny_tools.tools:manage", "status"]
    # Busy: another holder keeps the installer fence past the wait.
    with store.fence(PLUGIN, wait=0) as held:
        assert held
        with pytest.raises(PluginRefusal, match="holds this installation"):
            prepare(installed.manager.root, PLUGIN, "manage", [], wait=0.3)
    # The selection changes while the launcher waits for the fence: refused under it.
    original = store.selection(PLUGIN)
    outcome: list[BaseException | None] = []

    def waiting() -> None:
        try:
            _, fd = prepare(installed.manager.root, PLUGIN, "manage", [], wait=10)
            os.close(fd)
            outcome.append(None)
        except PluginRefusal as refusal:
            outcome.append(refusal)

    try:
        with store.fence(PLUGIN, wait=0) as held:
            assert held
            worker = threading.Thread(target=waiting)
            worker.start()
            time.sleep(0.5)
            store.publish(PLUGIN, msgspec.structs.replace(original, revision=original.revision + 7))
        worker.join(15)
        assert outcome and isinstance(outcome[0], PluginRefusal)
        assert "selection changed" in outcome[0].message
    finally:
        store.publish(PLUGIN, original)
    # A pending selection change refuses before anything runs.
    pending = LifecycleOperation(
        operation_id="f" * 32,
        plugin_id=PLUGIN,
        request=LifecycleRequest(operation_id="f" * 32, action="disable", expected_revision=0),
        state="recovery_required",
        accepted_at=int(time.time()),
        updated_at=int(time.time()),
    )
    store.record(pending)
    journal = store.directory(PLUGIN) / "operations" / f"{'f' * 32}.json"
    try:
        with pytest.raises(PluginRefusal, match="is pending"):
            prepare(installed.manager.root, PLUGIN, "manage", [])
    finally:
        journal.unlink()
    # Lost trust history: the retained signed record is gone.
    reviewed = store.directory(PLUGIN) / "reviews" / f"{installed.digest}.json"
    aside = reviewed.with_name("aside.bin")
    reviewed.rename(aside)
    try:
        with pytest.raises(PluginRefusal, match="trust history is lost"):
            prepare(installed.manager.root, PLUGIN, "manage", [])
    finally:
        aside.rename(reviewed)
    _, fence = prepare(installed.manager.root, PLUGIN, "setup", [])
    os.close(fence)
