"""`skulk --help` lists every command without importing any (issue 43), and what it
lists is what each command's own help says."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from skulk_cli.lazy_commands import COMMANDS, load
from skulk_cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def test_each_listed_summary_is_the_first_paragraph_of_the_commands_help() -> None:
    for entry in COMMANDS:
        command = load(entry.name)
        text = inspect.cleandoc(command.short_help or command.help or "")
        first = text.split("\n\n")[0].replace("\n", " ").strip()
        assert entry.summary == first, entry.name
        assert not command.hidden and not command.deprecated, entry.name
        assert not getattr(command, "rich_help_panel", None), entry.name  # the default panel


def test_help_lists_every_command_and_a_command_still_runs_with_its_options() -> None:
    listing = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert listing.exit_code == 0, listing.output
    for entry in COMMANDS:
        assert f" {entry.name} " in listing.output
        assert entry.summary.replace("`", "") in listing.output
    # A group's own subcommands (some added from a second module) load with it.
    store = CliRunner().invoke(app, ["store", "--help"], env={"COLUMNS": "200"})
    assert store.exit_code == 0, store.output
    for sub in ("download", "cancel", "storage", "reconciliation"):
        assert f" {sub} " in store.output
    unknown = CliRunner().invoke(app, ["no-such-command"])
    assert unknown.exit_code == 2


def test_help_and_version_import_no_command_module() -> None:
    code = (
        "import sys; from skulk_cli.main import app\n"
        "for argv in (['--help'], ['--version']):\n"
        "    try:\n"
        "        app(argv, prog_name='skulk')\n"
        "    except SystemExit:\n"
        "        pass\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('skulk_cli.commands.')\n"
        "    or m in ('httpx', 'skulk_cli.client', 'skulk_core.config'))\n"
        "print('LOADED', loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert "LOADED []" in done.stdout, done.stdout + done.stderr
