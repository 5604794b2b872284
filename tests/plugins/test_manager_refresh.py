"""After a Skulk update the host refreshes the manager's runtime by itself.

Real processes throughout: ``skulk-plugin-service setup`` selects the first generation;
the test then stands in for the registered service (the setup record says ``systemd``,
as a registered setup's does) with a keep-alive loop over setup's exact serve command
(systemd's ``Restart=always``: started again whenever it exits); one real daemon runs
across the module and is never restarted.

"A Skulk update" is a manager on a generation of another build: a copy of a staged
generation (hard links, so no second gigabyte) with one Skulk file changed, sealed
again, selected, and the running manager stopped so the keep-alive starts it there.
Three such earlier builds: one that names ``reload_runtime``, one from before it (its
inventory does not name it) and one that refuses every generation. No staging here:
setup verifies and reuses a sealed copy of the session's staging
(``tests/plugins/runtime_copies.py``), and each refresh reuses that copy of the host's
build, which the host keeps selected or collects like any other generation.

Proves: the daemon's plugin routes go from 503 ``manager_build_differs`` to 200 without
a restart, through ``reload_runtime`` and through stopping a manager that does not name
it; ``status`` verifies the refreshed generation; unused generations go, leaving exactly
the selected one and the newest other complete one, an interrupted copy included; a
manager that refuses keeps serving, the refusal says so, and the candidate is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from skulk_host.files import atomic_write
from skulk_host.plugin_manager.client import call_with_peer
from skulk_host.plugin_service.runtime import (
    COMPLETE_FILE,
    Completion,
    read_seal,
    record_selection,
    select,
    selected,
)
from tests.daemon_process import DaemonProcess
from tests.plugins.runtime_copies import SessionRuntime, sealed_copy

pytestmark = pytest.mark.xdist_group("plugin_runtime")

SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
OWNER = {"X-Skulk-Dashboard": "pairing-v1"}
GENERATION = re.compile(r"^[0-9a-f]{16}$")
SETTLE_SECONDS = 420.0
"""A refresh verifies the staged runtime (staging it when none of this build is there)
and the manager verifies it again when it starts."""

KEEP_ALIVE = """\
# Restart=always: the registered command, started again whenever it exits.
import json, os, pathlib, subprocess, sys, time
command, state, current = json.loads(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
while True:
    with (state / "service.log").open("a") as log:
        process = subprocess.Popen(command, cwd="/", stdout=log, stderr=subprocess.STDOUT)
    with (state / "starts").open("a") as starts:
        starts.write(f"start {process.pid} {os.readlink(current)}\\n")
    code = process.wait()
    with (state / "starts").open("a") as starts:
        starts.write(f"exit {process.pid} {code}\\n")
    time.sleep(0.2)
"""


@dataclass
class Host:
    base: Path
    env: dict[str, str]
    daemon: DaemonProcess
    python: Path
    """The interpreter the session's staging ran setup from (the lean environment's): setup
    here and the node's refresh find that source and reuse its copy."""
    made: list[str] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.base / "service"

    @property
    def runtimes(self) -> Path:
        return self.root / "runtimes"

    @property
    def manager_root(self) -> Path:
        return self.root / "manager"

    @property
    def fake(self) -> Path:
        return self.base / "keep-alive"

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        home = ["--root", str(self.root), "--config-home", str(self.daemon.config_home)]
        return subprocess.run(
            [str(self.python), "-m", "skulk_cli.plugin_service", *args, *home],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.base,
            timeout=600,
            check=False,
        )

    def generations(self) -> set[str]:
        return {p.name for p in self.runtimes.iterdir() if GENERATION.match(p.name)}

    def generations_become(self, expected: set[str], seconds: float = 60) -> set[str]:
        """The generations once they are ``expected`` (the host collects the unused ones
        after its refresh, a moment after the plugin routes answer 200), or at the
        deadline."""
        deadline = time.monotonic() + seconds
        while (found := self.generations()) != expected and time.monotonic() < deadline:
            time.sleep(0.3)
        return found

    def answering(self) -> tuple[dict[str, Any] | None, int | None]:
        try:
            answer, pid = call_with_peer(self.manager_root, {"action": "list"}, timeout=2)
        except Exception:
            return None, None
        return (answer["result"] if answer.get("ok") else None), pid

    def wait_for_manager(self, generation: str, seconds: float = 180) -> int:
        """The pid of the manager once one answers on ``generation``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            listed, pid = self.answering()
            if listed is not None and listed["runtime_generation"] == generation and pid:
                return pid
            time.sleep(0.3)
        raise AssertionError(f"no manager on {generation}:\n{self.service_log()}")

    def service_log(self) -> str:
        log = self.fake / "service.log"
        return log.read_text()[-4000:] if log.exists() else ""

    def starts(self) -> list[tuple[str, int, str]]:
        lines = (self.fake / "starts").read_text().splitlines()
        return [(kind, int(pid), rest) for kind, pid, rest in (line.split() for line in lines)]

    def earlier_build(self, source: str, edit: Callable[[str], str], target: str) -> str:
        """A sealed copy of ``source`` (hard links) whose ``target`` file is changed by
        ``edit``: a generation of another Skulk build, staged under the fence."""
        copy = sealed_copy(
            self.runtimes / source,
            self.root,
            edits={f"{SITE}/{target}": edit},
            source_sha256=os.urandom(32).hex(),
            completed_at=int(time.time()) + len(self.made),
        )
        assert copy.build_sha256 != read_seal(self.runtimes / source).build_sha256
        self.made.append(copy.generation)
        return copy.generation

    def run_on(self, generation: str) -> int:
        """Select ``generation`` as setup would, stop the running manager and let the
        keep-alive start it there; its pid."""
        completion = msgspec.json.decode(
            (self.runtimes / generation / COMPLETE_FILE).read_bytes(), type=Completion
        )
        select(self.root, generation)
        record_selection(self.root, completion)
        _, pid = self.answering()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        return self.wait_for_manager(generation)

    def managed(self) -> httpx.Response:
        return httpx.get(f"{self.daemon.url}/v1/plugins/managed", headers=OWNER, timeout=60)

    def until_served(self) -> list[httpx.Response]:
        """Every answer of the plugin route until it is 200."""
        seen = []
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            response = self.managed()
            seen.append(response)
            if response.status_code == 200:
                return seen
            time.sleep(0.5)
        raise AssertionError(
            f"{[r.text for r in seen[-3:]]}\n{self.daemon.log_text()[-4000:]}\n"
            + self.service_log()
        )


def _refused_for_build(response: httpx.Response) -> str:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "manager_build_differs", response.text
    return str(error["message"])


def _register(host: Host) -> subprocess.Popen[bytes]:
    """What a registered setup leaves: ``service`` recorded, and the serve command kept
    alive (the command setup registers: the ``current`` link's interpreter, isolated, on
    that generation's bootstrap)."""
    record = json.loads((host.root / "setup.json").read_text())
    assert record["python"] == str(host.runtimes / "current" / "bin" / "python")
    atomic_write(host.root / "setup.json", json.dumps({**record, "service": "systemd"}).encode())
    command = [
        record["python"],
        "-I",
        "-S",
        "-B",
        str(host.runtimes / "current" / "bootstrap.py"),
        "serve",
        "--root",
        str(host.manager_root),
        "--sealed-runtime",
    ]
    host.fake.mkdir()
    (host.fake / "keep_alive.py").write_text(KEEP_ALIVE)
    return subprocess.Popen(
        [
            sys.executable,
            str(host.fake / "keep_alive.py"),
            json.dumps(command),
            str(host.fake),
            str(host.runtimes / "current"),
        ],
        env=host.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.fixture(scope="module")
def host(
    tmp_path_factory: pytest.TempPathFactory, session_runtime: SessionRuntime
) -> Iterator[Host]:
    base = tmp_path_factory.mktemp("refresh")
    # The session's staging, copied as hard links: setup here verifies and reuses it.
    session_runtime.copy_into(base / "service")
    (base / "home").mkdir()
    env = {**os.environ, "HOME": str(base / "home"), "NO_COLOR": "1"}
    env.pop("SKULK_PLUGIN_SERVICE_ROOT", None)
    # NOTE: the node runs from the lean environment too: its refresh stages a generation
    # of its own source unless it finds a complete one, setup's copy.
    models = base / "models"
    models.mkdir()
    python = session_runtime.python
    daemon = DaemonProcess(root=base / "node", models_dir=models, fabric_port=0, python=str(python))
    host = Host(base, env, daemon, python)
    keep_alive: subprocess.Popen[bytes] | None = None
    try:
        done = host.cli("setup")
        assert done.returncode == 0, done.stdout + done.stderr
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["phase"] == "selected", done.stdout
        keep_alive = _register(host)
        host.wait_for_manager(summary["generation"])
        yield host
    finally:
        daemon.kill()
        if keep_alive is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(keep_alive.pid, signal.SIGTERM)
            keep_alive.wait(timeout=30)
        time.sleep(2)
        # NOTE: each generation is a full copy of this environment; keep none around.
        shutil.rmtree(base / "service", ignore_errors=True)


def _comment(text: str) -> str:
    return text + "\n# an earlier Skulk build\n"


def _before_reload_runtime(text: str) -> str:
    """The manager before ``reload_runtime``: its listing does not offer it (the host
    reads a missing key and ``False`` alike)."""
    return text.replace(
        "            reload_runtime=True,\n", "            reload_runtime=False,\n", 1
    )


def _refusing(text: str) -> str:
    """A manager that names ``reload_runtime`` and refuses every generation."""
    marker = '    """Select the staged generation ``request`` names (its seal verified first)."""\n'
    assert marker in text
    sentence = "This manager build accepts no other runtime."
    return text.replace(marker, marker + f'    raise refuse("seal_mismatch", "{sentence}")\n', 1)


def test_a_manager_that_names_reload_runtime_is_reloaded_onto_the_host_build(host: Host) -> None:
    first = selected(host.root)
    assert first is not None
    older = host.earlier_build(first, _comment, "skulk_core/__init__.py")
    newest = host.earlier_build(first, _comment, "skulk/__init__.py")  # completed later
    host.run_on(newest)
    # setup's own copy stays: the host's refresh finds it complete and reuses it, as it
    # would its own earlier staging (the session's staging is the real copy: staging
    # is the one function setup and the refresh share).
    interrupted = host.runtimes / ("f" * 16)
    (interrupted / "bin").mkdir(parents=True)
    assert host.generations() == {first, newest, older, "f" * 16}

    host.daemon.start()
    seen = host.until_served()
    message = _refused_for_build(seen[0])
    assert "staging a manager runtime of its build" in message, message
    assert all(r.status_code == 503 for r in seen[:-1]), [r.text for r in seen]
    assert seen[-1].json()["reload_runtime"] is True

    staged = selected(host.root)
    assert staged == first
    listed, _ = host.answering()
    assert listed is not None and listed["runtime_generation"] == staged
    # The 200 says the daemon found its own build; it is the staged copy's.
    assert listed["build_sha256"] == read_seal(host.runtimes / staged).build_sha256
    status = host.cli("status")
    assert status.returncode == 0, status.stdout + status.stderr
    body = json.loads(status.stdout)
    assert (body["generation"], body["running_generation"]) == (staged, staged)
    assert body["registered_runtime_verified"] and body["management_available"]
    # Kept: the selected generation and the newest other complete one; gone: the older
    # earlier build and the interrupted copy.
    assert host.generations_become({staged, newest}) == {staged, newest}


def test_a_manager_from_before_reload_runtime_is_stopped_and_restarted(host: Host) -> None:
    staged = selected(host.root)
    assert staged is not None
    before = host.earlier_build(
        staged, _before_reload_runtime, "skulk_host/plugin_manager/runtime.py"
    )
    pid = host.run_on(before)
    listed, _ = host.answering()
    assert listed is not None and listed.get("reload_runtime") is not True

    seen = host.until_served()
    assert "manager_build_differs" in seen[0].text, seen[0].text
    restarted = host.wait_for_manager(staged)
    assert restarted != pid
    assert selected(host.root) == staged
    # The earlier manager exited on the host's stop; the keep-alive started the one that
    # answers on this build. (Its log names the link the keep-alive read as it spawned,
    # which under load can still be the earlier build the host is moving off.)
    starts = host.starts()
    assert ("exit", pid, "0") in starts
    assert starts[-1][:2] == ("start", restarted)
    status = json.loads(host.cli("status").stdout)
    assert (status["generation"], status["registered_runtime_verified"]) == (staged, True)
    assert host.generations_become({staged, before}) == {staged, before}


def test_a_manager_that_refuses_keeps_serving_and_the_candidate_goes(host: Host) -> None:
    staged = selected(host.root)
    assert staged is not None
    refusing = host.earlier_build(staged, _refusing, "skulk_host/plugin_manager/runtime.py")
    pid = host.run_on(refusing)
    deadline = time.monotonic() + SETTLE_SECONDS
    message = ""
    while "refused" not in message and time.monotonic() < deadline:
        message = _refused_for_build(host.managed())
        time.sleep(0.5)
    assert "refused the runtime staged for this build" in message, message
    assert "This manager build accepts no other runtime." in message
    assert "skulk-plugin-service setup" in message
    # The refusing manager still serves on its own generation; the candidate is gone.
    listed, answering = host.answering()
    assert answering == pid and listed is not None
    assert listed["runtime_generation"] == refusing
    assert selected(host.root) == refusing
    assert staged not in host.generations()
    assert refusing in host.generations()
    # Settled: the host does not stage again for this manager.
    time.sleep(3)
    assert staged not in host.generations()
    assert _refused_for_build(host.managed()) == message
