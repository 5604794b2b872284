"""The CLI against a real daemon: what an operator sees in a terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

DEMO = "local/gemma-3-270m-q4_k_m"


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    """One node for the module: one test changes its log level, the other places and
    deletes an instance, and neither reads what the other changes."""
    node = DaemonProcess(
        root=tmp_path_factory.mktemp("cli-node"),
        models_dir=shared_models_dir,
    )
    node.start()
    try:
        yield node
    finally:
        node.kill()


def skulk(
    daemon: DaemonProcess, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    # The real console script entry point, as a user runs it.
    return subprocess.run(
        [sys.executable, "-m", "skulk_cli", "--api-url", daemon.url, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_status_models_and_config(daemon: DaemonProcess) -> None:
    node_id = daemon.get("/node_id").json()
    status = skulk(daemon, "status")
    assert status.returncode == 0, status.stderr
    assert node_id[:8] in status.stdout

    as_json = json.loads(skulk(daemon, "--json", "status").stdout)
    assert as_json["identity"]["nodeId"] == node_id

    models = skulk(daemon, "models", "list")
    assert models.returncode == 0
    assert DEMO in models.stdout

    refused = skulk(daemon, "config", "set", "logging.level", "loud")
    assert refused.returncode == 1
    assert "logging.level" in refused.stderr
    accepted = skulk(daemon, "config", "set", "logging.level", "debug")
    assert accepted.returncode == 0, accepted.stderr
    assert daemon.get("/config").json()["config"]["logging"]["level"] == "debug"


def test_voices_with_no_speech_model_placed_says_what_to_place(daemon: DaemonProcess) -> None:
    shown = skulk(daemon, "voices")
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "No text-to-speech model is placed" in text
    assert "skulk place local/piper-en-us-joe-medium" in text


def test_place_chat_and_delete(daemon: DaemonProcess) -> None:
    placed = skulk(daemon, "--json", "place", DEMO, "--context-tokens", "512")
    assert placed.returncode == 0, placed.stderr
    instance_id = json.loads(placed.stdout)["place"]["instance_id"]

    listed = skulk(daemon, "instances", "list")
    assert instance_id[:8] in listed.stdout

    chat = skulk(daemon, "chat", DEMO, "Count: one, two, three,", "--max-tokens", "8")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.strip()

    deleted = skulk(daemon, "instances", "delete", instance_id)
    assert deleted.returncode == 0, deleted.stderr
    assert instance_id not in daemon.get("/state").json()["instances"]
    missing = skulk(daemon, "instances", "show", instance_id)
    assert missing.returncode == 1


def complete(tmp_path: Path, words: str) -> subprocess.CompletedProcess[str]:
    """What bash completes for ``words`` through the committed completion script."""
    shim = tmp_path / "skulk"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m skulk_cli "$@"\n')
    shim.chmod(0o755)
    script = f"""
        source "{Path(__file__).resolve().parents[2] / "completions" / "skulk.bash"}"
        COMP_WORDS=({words})
        COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))
        _skulk_completion skulk
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_model_ids_tab_complete_from_the_node(daemon: DaemonProcess, tmp_path: Path) -> None:
    done = complete(tmp_path, f"skulk --api-url {daemon.url} chat local/gem")
    assert done.returncode == 0, done.stderr
    assert DEMO in done.stdout.split()
    assert all(word.startswith("local/gem") for word in done.stdout.split())

    # With the node down there is nothing to suggest, and nothing is printed.
    dead = complete(tmp_path, "skulk --api-url http://127.0.0.1:9 say local/")
    assert dead.returncode == 0
    assert dead.stdout.strip() == "" and dead.stderr == ""


def test_unreachable_node_is_a_clear_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "skulk_cli", "--api-url", "http://127.0.0.1:9", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "skulk serve" in result.stderr


def test_top_shows_the_cluster_and_this_nodes_tokens(
    demo_served: tuple[DaemonProcess, str],
) -> None:
    daemon, _ = demo_served
    body = {
        "model": DEMO,
        "messages": [{"role": "user", "content": "Count: one, two,"}],
        "max_tokens": 5,
    }
    assert daemon.post("/v1/chat/completions", json=body, timeout=120).status_code == 200
    shown = skulk(daemon, "top", "--once", "--interval", "0.3", timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "generation(s) in flight" in shown.stdout
    assert DEMO in shown.stdout and "tokens/s" in shown.stdout
    assert daemon.get("/node_id").json()[:8] in shown.stdout


def test_a_capture_is_saved_to_a_file_and_summarised(daemon: DaemonProcess, tmp_path: Path) -> None:
    node_id = daemon.get("/node_id").json()
    saved = subprocess.run(
        [sys.executable, "-m", "skulk_cli", "--api-url", daemon.url, "diagnostics", "capture"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert saved.returncode == 0, saved.stderr
    (path,) = tmp_path.glob("skulk-capture-*.json")
    assert json.loads(path.read_text())["nodeId"] == node_id
    text = " ".join(saved.stdout.split())
    assert f"Saved to {path.name}" in text
    assert "memory" in text
    assert len(saved.stdout.splitlines()) < 10  # a summary, not the document

    # Never over an existing file: a second capture to the same name is refused.
    again = skulk(daemon, "diagnostics", "capture", "-o", str(path))
    assert again.returncode == 1
    assert "could not save the capture" in again.stderr
    assert json.loads(path.read_text())["nodeId"] == node_id

    # Scripts still get the JSON on stdout.
    printed = skulk(daemon, "diagnostics", "capture", "-o", "-")
    assert json.loads(printed.stdout)["nodeId"] == node_id
    assert json.loads(skulk(daemon, "--json", "diagnostics", "capture").stdout)["nodeId"]
