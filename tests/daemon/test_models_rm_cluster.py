"""`skulk models rm` removes a model from every node, not only the CLI's own.

Two real daemons in one cluster, each with a models dir of its own (the packaged
demos marked removed there, so nothing is assembled) and its own imported copy of
the same small GGUF. The CLI talks to one node; afterwards neither node holds the
files nor lists the model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from skulk_core.ids import ModelId
from skulk_core.models.demo_ids import PACKAGED_DEMO_IDS
from skulk_daemon.models.packaged import removed_marker
from skulk_daemon.models.sidecar import model_dir_name
from tests.daemon.serving import wait_for
from tests.daemon_process import DaemonProcess
from tests.hub.gguf_files import write_tiny_gguf

pytestmark = pytest.mark.slow

MODEL = "local/tiny-shared"


def without_demos(models_dir: Path) -> Path:
    for demo in PACKAGED_DEMO_IDS:
        marker = removed_marker(models_dir / model_dir_name(ModelId(demo)))
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    return models_dir


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[DaemonProcess]]:
    root = tmp_path_factory.mktemp("rm-cluster")
    first = DaemonProcess(root=root / "a", models_dir=without_demos(root / "a-models"))
    second = DaemonProcess(
        root=root / "b",
        models_dir=without_demos(root / "b-models"),
        peers=[first.fabric_address],
    )
    made = [first, second]
    try:
        for node in made:  # both start at once: the second finds the first when it is up
            node.spawn()
        for node in made:
            node.wait_ready()

        def joined() -> bool:
            state = first.get("/state").json()
            return len(state["topology"]["nodes"]) == 2 and len(state.get("nodeMemory", {})) == 2

        wait_for(joined, "two nodes in one cluster", 120)
        yield made
    finally:
        for node in made:
            node.kill()


def copy_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def installed_here(node: DaemonProcess) -> bool:
    data = node.get("/v1/models").json()["data"]
    return any(item["id"] == MODEL and item["installed"] for item in data)


def test_models_rm_removes_the_model_from_every_node(
    nodes: list[DaemonProcess], tmp_path: Path
) -> None:
    for index, node in enumerate(nodes):
        source = write_tiny_gguf(copy_dir(tmp_path / f"copy-{index}") / "tiny-shared.gguf")
        imported = node.post("/models/import", json={"path": str(source)}, timeout=60)
        assert imported.status_code == 200, imported.text
        assert installed_here(node)

    removed = subprocess.run(
        [sys.executable, "-m", "skulk_cli", "--api-url", nodes[0].url, "models", "rm", MODEL],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert removed.returncode == 0, removed.stderr
    said = " ".join(removed.stdout.split())
    assert f"Removed {MODEL}: its files on this node, " in said
    for node in nodes:
        assert not installed_here(node)
        assert not list((node.models_dir / model_dir_name(ModelId(MODEL))).glob("*.gguf"))
