"""What a newcomer meets first: `skulk --version`, and help that reads right."""

from __future__ import annotations

import pytest
import typer.main

from skulk_cli.main import app
from skulk_core.version import SKULK_VERSION

from .test_cli import plain, run


def _command_paths() -> list[tuple[str, ...]]:
    root = typer.main.get_command(app)
    paths: list[tuple[str, ...]] = [()]

    def walk(group: object, prefix: tuple[str, ...]) -> None:
        for name, command in getattr(group, "commands", {}).items():
            paths.append((*prefix, name))
            walk(command, (*prefix, name))

    walk(root, ())
    return paths


def test_version_prints_the_version_and_exits() -> None:
    result = run("--version")

    assert result.exit_code == 0
    assert result.stdout.strip() == f"skulk {SKULK_VERSION}"


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "skulk")
def test_no_help_shows_a_type_on_a_flag(path: tuple[str, ...]) -> None:
    result = run(*path, "--help")

    assert result.exit_code == 0, result.output
    assert "<bool>" not in plain(result.stdout)
