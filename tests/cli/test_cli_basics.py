"""What a newcomer meets first: `skulk --version`, and help that reads right."""

from __future__ import annotations

import re

import pytest
import typer.main
from typer._click.core import Command, Context
from typer.core import TyperGroup
from typer.testing import CliRunner

from skulk_cli.main import app
from skulk_cli.plugin_service.main import app as plugin_service_app
from skulk_core.version import SKULK_VERSION

from .test_cli import plain, run


def _command_paths() -> list[tuple[str, ...]]:
    root = typer.main.get_command(app)
    paths: list[tuple[str, ...]] = [()]

    def walk(command: Command, prefix: tuple[str, ...]) -> None:
        if not isinstance(command, TyperGroup):
            return
        # Through click's API: the root group loads its commands lazily (no .commands).
        context = Context(command)
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            assert sub is not None, name
            paths.append((*prefix, name))
            walk(sub, (*prefix, name))

    walk(root, ())
    return paths


def test_version_prints_the_version_and_exits() -> None:
    result = run("--version")

    assert result.exit_code == 0
    assert result.stdout.strip() == f"skulk {SKULK_VERSION}"


PYTHON_TYPES = re.compile(r"<(bool|str|int|float|float range|int range)>")


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "skulk")
def test_help_names_values_not_python_types(path: tuple[str, ...]) -> None:
    result = run(*path, "--help")

    assert result.exit_code == 0, result.output
    assert not PYTHON_TYPES.search(plain(result.stdout)), plain(result.stdout)


def test_an_option_value_is_named_after_its_option() -> None:
    shown = plain(run("diagnostics", "capture", "--help").stdout)
    assert "--runner" in shown and "<runner>" in shown
    assert "<seconds> [0.0<=x<=10.0]" in shown


def test_the_plugin_service_cli_names_values_too() -> None:
    result = CliRunner().invoke(plugin_service_app, ["--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    assert not PYTHON_TYPES.search(plain(result.stdout)), result.stdout
