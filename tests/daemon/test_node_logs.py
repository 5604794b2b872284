"""The node's log as an operator meets it: `skulk config set logging.level debug`, a
restart, and `skulk logs` shows DEBUG lines from the owner-only file in the data dir;
`skulk config show` says what is in effect and where each value came from."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.serving import wait_for
from tests.daemon_process import DaemonProcess, free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    node = DaemonProcess(root=tmp_path_factory.mktemp("logs-node"), models_dir=shared_models_dir)
    node.start()
    try:
        yield node
    finally:
        node.kill()


def skulk(
    daemon: DaemonProcess, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skulk_cli", "--api-url", daemon.url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def in_effect(daemon: DaemonProcess) -> dict[str, tuple[object, str]]:
    shown = skulk(daemon, "--json", "config", "show")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)["effective"]["in_effect"]
    return {row["key"]: (row["value"], row["source"]) for row in rows}


def log_file(daemon: DaemonProcess) -> Path:
    return daemon.data_dir / "logs" / "skulk.log"


def test_config_show_names_each_setting_in_effect_and_its_source(daemon: DaemonProcess) -> None:
    rows = in_effect(daemon)
    assert rows["api.port"] == (daemon.port, "flag")
    assert rows["cluster.fabric_port"] == (daemon.fabric_port, "flag")
    assert rows["cluster.mdns"] == (False, "env")  # the tests run with SKULK_MDNS=0
    assert rows["logging.level"][1] in ("default", "file")
    assert rows["logging.file"] == (str(log_file(daemon)), "default")
    assert rows["paths.data_dir"] == (str(daemon.data_dir), "flag")

    table = skulk(daemon, "config", "show").stdout
    assert "In effect on this node" in table
    port_row = next(line for line in table.splitlines() if "api.port" in line)
    assert str(daemon.port) in port_row and "flag" in port_row


def test_the_log_file_is_owner_only_and_skulk_logs_tails_it(daemon: DaemonProcess) -> None:
    path = log_file(daemon)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700

    before = len(path.read_text().splitlines())
    shown = skulk(daemon, "logs", "-n", "3")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == 3
    # The node may log a line meanwhile (its start-up lines come late): what was shown
    # is the file's last three lines at some moment between the two reads.
    after = path.read_text().splitlines()
    assert lines in [after[end - 3 : end] for end in range(before, len(after) + 1)]

    # The node down (a dead --api-url): the file is found through --data-dir.
    dead = f"http://127.0.0.1:{free_port()}"
    argv = ["--api-url", dead, "logs", "-n", "1", "--data-dir", str(daemon.data_dir)]
    before = len(path.read_text().splitlines())
    offline = subprocess.run(
        [sys.executable, "-m", "skulk_cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert offline.returncode == 0, offline.stderr
    # The same window as above: the last line at some moment between the two reads.
    after = path.read_text().splitlines()
    assert offline.stdout.strip() in after[before - 1 :]

    missing = skulk(daemon, "logs", "--data-dir", str(daemon.root / "nowhere"))
    assert missing.returncode == 1
    assert "No node log at" in missing.stderr


def test_debug_level_set_then_restart_gives_debug_lines(daemon: DaemonProcess) -> None:
    assert " DEBUG " not in log_file(daemon).read_text()

    changed = skulk(daemon, "config", "set", "logging.level", "debug")
    assert changed.returncode == 0, changed.stderr
    assert "skulk restart" in changed.stderr
    pending = skulk(daemon, "config", "show").stdout
    assert "skulk.yaml now says debug" in " ".join(pending.split())

    follower = subprocess.Popen(
        [sys.executable, "-m", "skulk_cli", "--api-url", daemon.url, "logs", "-f", "-n", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follower.stdout is not None
    followed: list[str] = []

    def read_follower() -> None:
        for line in follower.stdout or ():
            followed.append(line)

    reader = threading.Thread(target=read_follower, daemon=True)
    reader.start()
    try:
        # Its first line (the file's last) says the follower holds the file open.
        wait_for(lambda: bool(followed), "`logs -f` to print the last line", 60)
        offset = len(daemon.log_text())
        restarted = skulk(daemon, "restart")  # no NODE: the cluster is this one node
        assert restarted.returncode == 0, restarted.stderr
        assert "Restarting" in restarted.stdout
        wait_for(lambda: "restarting in place" in daemon.log_text()[offset:], "the restart", 90)
        daemon.wait_ready()
        # `logs -f` goes on through the restart: it sees the old process go and the new
        # one log at DEBUG.
        wait_for(lambda: any(" DEBUG " in line for line in followed), "a followed DEBUG line", 30)
    finally:
        follower.terminate()
        reader.join(timeout=30)
        follower.wait(timeout=30)
        follower.stdout.close()
        if follower.stderr is not None:
            follower.stderr.close()
    assert any("restarting in place" in line for line in followed)
    assert " DEBUG " in log_file(daemon).read_text()

    assert in_effect(daemon)["logging.level"] == ("debug", "file")
    tail = skulk(daemon, "logs", "-n", "400").stdout
    assert " DEBUG skulk: in effect: api.port" in tail
