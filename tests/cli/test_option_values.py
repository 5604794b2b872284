"""Plain option values are coerced without pydantic (issue 43: `skulk status` in
0.3 s), and every value reads exactly as Typer's own adapters read it: the same
value, or the same refusal in the same words."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

import pytest
import typer
import typer.core
from typer._coercion import build_runtime_param
from typer.testing import CliRunner

from skulk_cli import option_values


class Colour(StrEnum):
    RED = "red"
    GREEN = "green"


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False)

    @app.command()
    def show(  # noqa: PLR0917 - one option of each kind
        word: Annotated[str, typer.Argument()] = "w",
        name: Annotated[str | None, typer.Option("--name")] = None,
        limit: Annotated[int, typer.Option(min=1, max=100)] = 20,
        offset: Annotated[int, typer.Option(min=0)] = 0,
        delta: int = -3,
        temperature: Annotated[float | None, typer.Option(min=0.0, max=2.0)] = None,
        ratio: float = 1,
        clamped: Annotated[int, typer.Option(min=0, max=10, clamp=True)] = 5,
        colour: Colour = Colour.RED,
        shade: Annotated[Colour, typer.Option(case_sensitive=False)] = Colour.RED,
        mode: Annotated[Literal["fast", "slow"], typer.Option()] = "fast",
        out: Annotated[Path | None, typer.Option(dir_okay=False)] = None,
        src: Annotated[Path | None, typer.Option(exists=True, resolve_path=True)] = None,
        home: Path = Path("~/x"),
        peer: Annotated[list[str] | None, typer.Option()] = None,
        port: Annotated[list[int] | None, typer.Option(min=1)] = None,
    ) -> None:
        values = (word, name, limit, offset, delta, temperature, ratio, clamped, colour, shade)
        print(repr((*values, mode, out, src, home, peer, port)))
        print([type(v).__name__ for v in (*values, mode, out, src, home, peer, port)])

    return app


CASES: list[list[str]] = [
    [],
    ["hello", "--name", "n"],
    ["--name", ""],
    ["--name", " padded "],
    ["--name", "ünï"],
    ["--limit", "5"],
    ["--limit", "100"],
    ["--limit", "0"],
    ["--limit", "101"],
    ["--limit", "-1"],
    ["--limit", "007"],
    ["--limit", " 5"],
    ["--limit", "5 "],
    ["--limit", "1_0"],
    ["--limit", "+5"],
    ["--limit", "5.0"],
    ["--limit", "five"],
    ["--limit", ""],
    ["--limit", "99999999999999999999999"],
    ["--offset", "-0"],
    ["--delta", "-12"],
    ["--delta", "123456789012345678901234567890"],
    ["--temperature", "0.5"],
    ["--temperature", "1"],
    ["--temperature", "2"],
    ["--temperature", "2.5"],
    ["--temperature", "-0.1"],
    ["--temperature", "1e-1"],
    ["--temperature", ".5"],
    ["--temperature", "nan"],
    ["--temperature", "inf"],
    ["--temperature", "0.1234567890123456789"],
    ["--ratio", "3"],
    ["--ratio", "-2.25"],
    ["--ratio", "-0"],
    ["--ratio", "-0.0"],
    ["--clamped", "50"],
    ["--clamped", "-3"],
    ["--clamped", "7"],
    ["--clamped", "x"],
    ["--colour", "green"],
    ["--colour", "GREEN"],
    ["--colour", "blue"],
    ["--shade", "GREEN"],
    ["--shade", "Green"],
    ["--mode", "slow"],
    ["--mode", "SLOW"],
    ["--mode", "medium"],
    ["--out", "x.txt"],
    ["--out", "./a//b/"],
    ["--out", "/"],
    ["--out", "-"],
    ["--out", ""],
    ["--src", "/"],
    ["--src", "/no/such/path"],
    ["--src", "."],
    ["--home", "/tmp"],
    ["--peer", "a", "--peer", "b:1"],
    ["--port", "1", "--port", "2"],
    ["--port", "1", "--port", "0"],
    ["--port", "x"],
]


@pytest.mark.parametrize("argv", CASES, ids=lambda argv: " ".join(argv) or "defaults")
def test_each_value_reads_as_typers_own_adapters_read_it(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    option_values.install()
    plain = CliRunner().invoke(_app(), argv, env={"COLUMNS": "200"})
    monkeypatch.setattr(typer.core, "build_runtime_param", build_runtime_param)
    stock = CliRunner().invoke(_app(), argv, env={"COLUMNS": "200"})
    assert (plain.exit_code, plain.output) == (stock.exit_code, stock.output)
    assert not isinstance(plain.exception, AssertionError)


def test_plain_values_need_no_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL, counts in range, a choice, defaults: no Typer adapter is built for them."""

    def refuse(_descriptor: object) -> None:
        raise AssertionError("a plain value went to Typer's adapter")

    option_values.install()
    monkeypatch.setattr(option_values, "build_runtime_param", refuse)
    command = typer.main.get_command(_app())
    argv = ["w", "--name", "http://x", "--limit", "5", "--temperature", "0.7", "--colour", "green"]
    context = command.make_context("show", argv)
    assert context.params["limit"] == 5 and context.params["temperature"] == 0.7
    assert context.params["colour"] is Colour.GREEN and context.params["ratio"] == 1.0
