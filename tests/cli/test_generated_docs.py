"""The committed completions and man pages match the CLI, and actually work."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "scripts" / "gen_cli_docs.py"


def generator(*args: str, columns: str = "100") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": columns}
    return subprocess.run(
        [sys.executable, str(GENERATOR), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("columns", ["100", "37"])
def test_committed_files_are_up_to_date(columns: str) -> None:
    done = generator("--check", columns=columns)

    assert done.returncode == 0, f"regenerate with `python scripts/gen_cli_docs.py`:\n{done.stderr}"


def test_check_reports_changed_missing_and_obsolete_files(tmp_path: Path) -> None:
    assert generator("--out", str(tmp_path)).returncode == 0
    assert generator("--check", "--out", str(tmp_path)).returncode == 0
    page = tmp_path / "man" / "skulk-models.1"
    page.write_text(page.read_text() + '.\\" hand edit\n')
    (tmp_path / "completions" / "skulk.fish").unlink()
    (tmp_path / "man" / "skulk-retired.1").write_text(".TH SKULK-RETIRED 1\n")

    done = generator("--check", "--out", str(tmp_path))

    assert done.returncode == 1
    assert "stale: man/skulk-models.1" in done.stderr
    assert "stale: completions/skulk.fish" in done.stderr
    assert "stale: man/skulk-retired.1" in done.stderr
    assert "stale: man/skulk.1" not in done.stderr
    assert generator("--out", str(tmp_path)).returncode == 0
    assert not (tmp_path / "man" / "skulk-retired.1").exists()
    assert generator("--check", "--out", str(tmp_path)).returncode == 0


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (
            "skulk ''",
            {
                "serve",
                "status",
                "previews",
                "place",
                "run",
                "chat",
                "bench",
                "models",
                "instances",
                "config",
                "operator",
                "doctor",
                "diagnostics",
                "trace",
                "restart",
                "logs",
                "top",
                "plugins",
                "registry",
                "store",
                "say",
                "transcribe",
                "voices",
                "connectivity",
                "video",
                "music",
                "ask",
                "steward",
                "image",
            },
        ),
        ("skulk video ''", {"create", "status", "download", "cancel"}),
        (
            "skulk diagnostics ''",
            {"node", "cluster", "timeline", "capture", "cancel", "telemetry", "envelopes"},
        ),
        (
            "skulk store ''",
            {
                "status",
                "downloads",
                "rm",
                "purge",
                "download",
                "cancel",
                "storage",
                "reconciliation",
                "optimize",
                "optimize-status",
            },
        ),
        ("skulk plugins proposals ''", {"list", "show", "approve", "status"}),
        ("skulk instances ''", {"list", "show", "rm"}),
        ("skulk place gemma --sharding ''", {"Pipeline", "Tensor"}),
        ("skulk mo", {"models"}),
        ("skulk models ''", {"list", "search", "add", "import", "rm", "download", "quants"}),
        ("skulk config ''", {"show", "set"}),
        ("skulk serve --api", {"--api-port"}),
        ("skulk chat gemma --format ''", {"openai", "claude", "ollama", "completion"}),
        ("skulk bench gemma --r", {"--runs"}),
    ],
)
def test_bash_completion_script_completes_commands_and_options(
    tmp_path: Path, words: str, expected: set[str]
) -> None:
    # The script runs `skulk` from PATH, as it would for a user.
    shim = tmp_path / "skulk"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m skulk_cli "$@"\n')
    shim.chmod(0o755)
    script = f"""
        source "{ROOT / "completions" / "skulk.bash"}"
        COMP_WORDS=({words})
        COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))
        _skulk_completion skulk
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=False
    )

    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == expected


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_man_pages_render_without_warnings() -> None:
    pages = sorted((ROOT / "man").glob("*.1"))
    assert {p.name for p in pages} >= {"skulk.1", "skulk-serve.1", "skulk-config.1"}
    for page in pages:
        done = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0 and not done.stderr, f"{page.name}: {done.stderr}"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (
            "skulk-plugin-service ''",
            {
                "setup",
                "serve",
                "status",
                "manage",
                "install-plugin",
                "catalog",
                "uninstall",
                "purge-plugin",
                "setup-plugin",
                "manage-plugin",
            },
        ),
        ("skulk-plugin-service manage-p", {"manage-plugin"}),
        ("skulk-plugin-service install-plugin --from", {"--from-catalog"}),
    ],
)
def test_plugin_service_completion_script_completes(
    tmp_path: Path, words: str, expected: set[str]
) -> None:
    shim = tmp_path / "skulk-plugin-service"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m skulk_cli.plugin_service "$@"\n')
    shim.chmod(0o755)
    script = f"""
        source "{ROOT / "completions" / "skulk-plugin-service.bash"}"
        COMP_WORDS=({words})
        COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))
        _skulk_plugin_service_completion skulk-plugin-service
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=False
    )

    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == expected
