"""Placing, finding and removing models and instances with `skulk`, as a newcomer does.

A real daemon with a models dir of its own (one test removes the demo model, which the
session's shared models dir must keep), driven by the real CLI as a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

DEMO = "local/gemma-3-270m-q4_k_m"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("cli-lifecycle")
    node = DaemonProcess(root=root / "node", models_dir=root / "models")
    node.start()
    try:
        yield node
    finally:
        node.kill()


def skulk(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skulk_cli", "--api-url", daemon.url, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def said(result: subprocess.CompletedProcess[str]) -> str:
    return " ".join((result.stdout + result.stderr).split())


def instances(daemon: DaemonProcess) -> list[str]:
    return sorted(daemon.get("/state").json()["instances"])


def listed(daemon: DaemonProcess) -> dict[str, bool]:
    data = daemon.get("/v1/models").json()["data"]
    return {item["id"]: item["installed"] for item in data}


def place(daemon: DaemonProcess, *extra: str) -> subprocess.CompletedProcess[str]:
    return skulk(daemon, "place", DEMO, "--context-tokens", "512", "--no-wait", *extra)


def test_a_typo_gets_did_you_mean_and_hints_speak_cli(daemon: DaemonProcess) -> None:
    for args in (
        ("place", "local/gemma-3-270m-q4km"),
        ("models", "download", "local/gemma-3-270m-q4km"),
    ):
        result = skulk(daemon, *args)
        assert result.returncode == 1, result.stdout
        text = said(result)
        assert f"did you mean {DEMO!r}?" in text
        assert "skulk models add OWNER/NAME" in text and "skulk models list" in text
        assert "POST /" not in text and "GET /" not in text


def test_placing_twice_is_refused_unless_another_replica_is_asked(daemon: DaemonProcess) -> None:
    first = place(daemon)
    assert first.returncode == 0, first.stderr
    (placed,) = instances(daemon)
    try:
        again = place(daemon)
        assert again.returncode == 1
        text = said(again)
        assert f"{DEMO} is already placed as instance {placed}." in text
        assert f"skulk instances rm {placed[:8]}" in text and "--another" in text
        assert instances(daemon) == [placed]

        replica = place(daemon, "--another")
        assert replica.returncode == 0, replica.stderr
        (second,) = set(instances(daemon)) - {placed}
        # A unique prefix is the instance, for show and rm alike.
        shown = skulk(daemon, "instances", "show", second[:6])
        assert shown.returncode == 0, shown.stderr
        assert second in shown.stdout
        removed = skulk(daemon, "instances", "rm", second[:6])
        assert removed.returncode == 0, removed.stderr
        assert instances(daemon) == [placed]
    finally:
        for instance_id in instances(daemon):
            assert httpx.delete(f"{daemon.url}/instance/{instance_id}").status_code == 200


def test_models_rm_refuses_a_placed_model_then_removes_it_for_good(daemon: DaemonProcess) -> None:
    assert place(daemon).returncode == 0
    (placed,) = instances(daemon)

    refused = skulk(daemon, "models", "rm", DEMO)
    assert refused.returncode == 1
    text = said(refused)
    assert f"{DEMO} is placed as instance {placed}" in text
    assert f"skulk instances rm {placed[:8]}" in text and f"skulk models rm {DEMO} --force" in text
    assert listed(daemon)[DEMO] is True and instances(daemon) == [placed]

    removed = skulk(daemon, "models", "rm", DEMO, "--force")
    assert removed.returncode == 0, removed.stderr
    text = said(removed)
    assert f"Removed {DEMO}: 1 instance(s), its files on this node." in text
    assert f"add it back with `skulk models add {DEMO}`" in text
    assert instances(daemon) == []
    assert DEMO not in listed(daemon)
    assert DEMO not in [item["id"] for item in daemon.get("/models").json()["data"]]
    assert DEMO not in skulk(daemon, "models", "list").stdout

    # The node says "add it back" in the CLI's words, and that brings it back.
    added = skulk(daemon, "models", "add", DEMO)
    assert added.returncode == 0, added.stderr
    assert f"Added {DEMO}" in added.stdout and f"Next: skulk place {DEMO}" in added.stderr
    assert listed(daemon)[DEMO] is True
