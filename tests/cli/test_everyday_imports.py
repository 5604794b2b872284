"""The everyday commands load only what they use (issue 43: `skulk status` in 0.3 s).

Each command runs in a fresh interpreter, as a user's `skulk` does, against the
stand-in node; what it printed must be the command's real answer, and what it
imported must leave out what only other commands need: pydantic (Typer's option
adapters), httpx's own command line, other commands' modules, spinners and live
displays, the config schema and the daemon. The CA bundle is not read either (a
plain-http node needs no TLS): it runs with ``SSL_CERT_FILE`` naming no file, which
httpx would otherwise fail to load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .fake_node import FakeNode

ROOT = Path(__file__).resolve().parents[2]

NEVER = (
    "pydantic",
    "pydantic_core",
    "click",  # httpx's own command line, not Typer's vendored click
    "pygments",
    "rich.live",
    "rich.progress",
    "rich.markdown",
    "markdown_it",
    "skulk_core.config",
    "skulk_daemon",
    "skulk_cli.operator_client",  # pairing: only `skulk --operator ...`
    "skulk_cli.operator_credentials",
)

_RUN = """
import json, sys
from skulk_cli.main import main
sys.argv, loaded = ["skulk", *json.loads(sys.argv[1])], sys.argv[2]
try:
    main()
finally:
    with open(loaded, "w") as out:
        json.dump(sorted(sys.modules), out)
"""


def _run(argv: list[str], home: Path) -> tuple[str, set[str]]:
    env = {**os.environ, "COLUMNS": "200", "HOME": str(home)}
    env["SSL_CERT_FILE"] = str(home / "no-such-ca.pem")
    env.pop("SKULK_API_URL", None)
    loaded = home / "loaded.json"
    done = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps(argv), str(loaded)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    return done.stdout + done.stderr, set(json.loads(loaded.read_text()))


def _heavy(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m.split(".")[0] in NEVER or m in NEVER)


def _commands(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m.startswith("skulk_cli.commands."))


def test_status_loads_only_what_it_shows(node: FakeNode, tmp_path: Path) -> None:
    output, loaded = _run(["--api-url", node.url, "status"], tmp_path)
    assert "alpha" in output and "Instances" in output, output
    assert _heavy(loaded) == [] and _commands(loaded) == ["skulk_cli.commands.status"]


def test_status_json_loads_no_rich_at_all(node: FakeNode, tmp_path: Path) -> None:
    """A script polling `skulk status --json` gets the node's JSON, and no terminal
    rendering is loaded for it."""
    output, loaded = _run(["--api-url", node.url, "status", "--json"], tmp_path)
    assert json.loads(output)["identity"]["hostname"] == "alpha"
    assert _heavy(loaded) == [] and not any(m.split(".")[0] == "rich" for m in loaded)


def test_status_without_a_node_loads_no_renderer(tmp_path: Path) -> None:
    output, loaded = _run(["--api-url", "http://127.0.0.1:9", "status"], tmp_path)
    assert "No Skulk node answering at http://127.0.0.1:9" in output
    assert _heavy(loaded) == [] and "skulk_cli.render" not in loaded


@pytest.mark.parametrize(
    ("argv", "shows", "absent"),
    [
        (["models", "list"], "gemma-3-270m-q4", ()),
        # The stand-in node has no diagnostics: the refusal path is what runs. The
        # doctor's checks are the daemon's, the jobs' renderers the jobs'.
        (
            ["diagnostics", "node"],
            "no route /v1/diagnostics/node",
            ("skulk_core.diagnostics.doctor", "skulk_cli.render_ops"),
        ),
    ],
    ids=["models list", "diagnostics node"],
)
def test_everyday_commands_load_no_heavy_module(
    node: FakeNode, argv: list[str], shows: str, absent: tuple[str, ...], tmp_path: Path
) -> None:
    output, loaded = _run(["--api-url", node.url, *argv], tmp_path)
    assert shows in output, output
    assert _heavy(loaded) == [] and loaded.isdisjoint(absent)
