"""`skulk store ...` against a real store-host daemon (a subprocess) over real HTTP.

The daemon is the cluster's store host, pointed at the fake hub; the test adds TINY
and has the store fetch it, then drives ``status``, ``downloads``, ``purge`` and
``rm`` the way a user would, in both the rich and the ``--json`` forms. The store's
jobs follow: ``download`` (``--no-wait``, and followed with its bar), ``cancel``
(partials kept, resumed by the next download), ``storage`` and ``reconciliation``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from skulk_cli.main import app
from tests.daemon_process import DaemonProcess, free_port
from tests.hub.conftest import TINY, seed_models_dir, standard_repos
from tests.hub.fake_hub import FakeHub

pytestmark = pytest.mark.slow

GGUF = "tiny-Q4_K_M.gguf"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TERMINAL = {"COLUMNS": "160", "LINES": "40"}
runner = CliRunner()


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    with FakeHub(standard_repos()) as served:
        yield served


@pytest.fixture(scope="module")
def daemon(
    hub: FakeHub, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("store-cli")
    models = seed_models_dir(root / "models", shared_models_dir)
    node = DaemonProcess(root=root, models_dir=models, extra_env={"HF_ENDPOINT": hub.url})
    node.config_home.mkdir(parents=True, exist_ok=True)
    (node.config_home / "skulk.yaml").write_text(
        "model_store:\n"
        "  store_host: true\n"
        f"  store_path: {root / 'canonical'}\n"
        f"  store_port: {free_port()}\n"
    )
    node.start()
    try:
        wait(lambda: node.get("/state").json().get("storeHosts"), "the store role")
        yield node
    finally:
        node.kill()


def wait(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def skulk(daemon: DaemonProcess, *args: str) -> Result:
    return runner.invoke(
        app, ["--api-url", daemon.url, "store", *args], env=TERMINAL, prog_name="skulk"
    )


def plain(text: str) -> str:
    return " ".join(ANSI.sub("", text).split())


def test_store_commands_against_a_store_host(daemon: DaemonProcess) -> None:
    empty = skulk(daemon, "status", "--json")
    assert empty.exit_code == 0, empty.output
    answer = json.loads(empty.stdout)
    assert answer["health"]["configured"] and answer["health"]["reachable"]
    assert answer["registry"]["entries"] == []
    shown = skulk(daemon, "status")
    assert shown.exit_code == 0, shown.output
    assert "The store holds no models." in plain(shown.stdout)
    assert re.search(r"reachable\s*│\s*yes", ANSI.sub("", shown.stdout))
    none = skulk(daemon, "downloads")
    assert none.exit_code == 0 and "No store downloads." in plain(none.stdout)

    added = daemon.post("/models/add", json={"model_id": TINY, "gguf_file": GGUF}, timeout=60)
    assert added.status_code == 200, added.text
    started = daemon.post(f"/store/models/{TINY}/download", json={}, timeout=60)
    assert started.status_code == 200, started.text
    watched = skulk(daemon, "downloads", "--watch")
    assert watched.exit_code == 0, watched.output
    wait(
        lambda: daemon.get(f"/store/models/{TINY}/download/status").json()["status"] == "complete",
        "the store download",
    )
    assert json.loads(skulk(daemon, "downloads", "--json").stdout) == []

    listed = skulk(daemon, "status")
    assert listed.exit_code == 0, listed.output
    row = next(line for line in ANSI.sub("", listed.stdout).splitlines() if TINY in line)
    assert "2.0 MiB" in row and "store_local" in row

    one = skulk(daemon, "purge", "--model", TINY, "--json")
    assert one.exit_code == 0, one.output
    purged = json.loads(one.stdout)
    assert set(purged) == {"commandId", "message"} and TINY in purged["message"]
    every = skulk(daemon, "purge")
    assert every.exit_code == 0 and "the store's copy stays" in plain(every.stdout)
    assert daemon.get("/state").json()["stagingPurgedAllAt"] is not None
    # A purge never touches the store's own copy.
    entries = json.loads(skulk(daemon, "status", "--json").stdout)["registry"]["entries"]
    assert [e["model_id"] for e in entries] == [TINY]

    escape = skulk(daemon, "rm", "../../etc")
    assert escape.exit_code == 1
    assert "escapes the model directory" in plain(escape.output)

    removed = skulk(daemon, "rm", TINY)
    assert removed.exit_code == 0, removed.output
    assert f"Deleted {TINY} from the store" in plain(removed.stdout)
    assert json.loads(skulk(daemon, "status", "--json").stdout)["registry"]["entries"] == []
    again = skulk(daemon, "rm", TINY, "--json")
    assert again.exit_code == 1 and "holds no model" in plain(again.output)


def test_store_jobs_download_cancel_storage_and_reconciliation(
    daemon: DaemonProcess, hub: FakeHub
) -> None:
    added = daemon.post("/models/add", json={"model_id": TINY, "gguf_file": GGUF}, timeout=60)
    assert added.status_code == 200, added.text
    hub.bytes_per_second = 64 * 1024  # 2 MiB: half a minute, time enough to cancel
    try:
        started = skulk(daemon, "download", TINY, "--no-wait", "--json")
        assert started.exit_code == 0, started.output
        assert json.loads(started.stdout)["status"] in ("pending", "in_progress")
        cancelled = skulk(daemon, "cancel", TINY)
        assert cancelled.exit_code == 0, cancelled.output
        assert f"Cancelled the store's download of {TINY}" in plain(cancelled.stdout)
    finally:
        hub.bytes_per_second = None
    status = daemon.get(f"/store/models/{TINY}/download/status").json()
    assert status["status"] == "cancelled"
    nothing = skulk(daemon, "cancel", "test-org/never-downloaded")
    assert nothing.exit_code == 1 and "No store download of" in plain(nothing.output)

    followed = skulk(daemon, "download", TINY)  # resumes the partial, with a bar
    assert followed.exit_code == 0, followed.output
    assert f"Stored {TINY} (2.0 MiB)" in plain(followed.stdout)
    again = skulk(daemon, "download", TINY, "--json")  # held already: complete at once
    assert json.loads(again.stdout)["status"] == "complete"

    storage = skulk(daemon, "storage", "--json")
    assert storage.exit_code == 0, storage.output
    [stored] = [a for a in json.loads(storage.stdout)["artifacts"] if a["model_id"] == TINY]
    assert stored["locationKind"] == "store_local" and stored["manifestComplete"]
    row = next(
        line for line in ANSI.sub("", skulk(daemon, "storage").stdout).splitlines() if TINY in line
    )
    assert "2.0 MiB" in row and "store_local" in row

    rescanned = skulk(daemon, "reconciliation", "--rescan", "--json")
    assert rescanned.exit_code == 0, rescanned.output
    answer = json.loads(rescanned.stdout)
    assert answer["automatic"] is True and TINY not in answer["tombstoned"]
    shown = skulk(daemon, "reconciliation")
    assert shown.exit_code == 0, shown.output
    table = plain(shown.stdout)
    assert "Store reconciliation" in table and f"nodes scanned │ {answer['scanned_nodes']}" in table
    assert skulk(daemon, "rm", TINY).exit_code == 0


def test_store_commands_without_a_node_say_so() -> None:
    result = runner.invoke(
        app,
        ["--api-url", f"http://127.0.0.1:{free_port()}", "store", "status"],
        env=TERMINAL,
        prog_name="skulk",
    )
    assert result.exit_code == 1
    assert "No Skulk node answering" in plain(result.output)
