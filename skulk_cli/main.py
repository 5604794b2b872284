"""The `skulk` command: the Typer app, its global options and the entry point."""

from __future__ import annotations

from typing import Annotated

import typer
from typer._completion_classes import completion_init

from skulk_cli import help_labels, option_values
from skulk_cli.lazy_commands import LazyGroup
from skulk_cli.node_http import DEFAULT_API_URL

PROG_NAME = "skulk"

# NOTE: Typer registers its shell-completion classes only when it adds its
# --install-completion options, which this app leaves out. Without them a request
# from the committed completion scripts (completions/, which Typer's classes
# generate) would reach click's stock classes, which speak another protocol.
completion_init()


help_labels.install()
# Plain option values (a URL, a count) are coerced without importing pydantic.
option_values.install()

app = typer.Typer(
    name=PROG_NAME,
    # Completions are generated into completions/ (scripts/gen_cli_docs.py) and
    # packaged; an installer that edits shell rc files is not wanted.
    add_completion=False,
    pretty_exceptions_show_locals=False,
    # Help paragraphs reflow to the terminal; `code` spans render as code.
    rich_markup_mode="markdown",
    cls=LazyGroup,
)
# The commands themselves are `skulk_cli.lazy_commands.COMMANDS`, each imported when
# it runs: `skulk --help` lists them without importing any.


def _print_version(value: bool) -> None:
    if value:
        from skulk_core.version import SKULK_VERSION  # noqa: PLC0415 (importlib.metadata: slow)

        print(f"{PROG_NAME} {SKULK_VERSION}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def root(
    ctx: typer.Context,
    api_url: Annotated[
        str,
        typer.Option(
            "--api-url",
            envvar="SKULK_API_URL",
            metavar="URL",
            help="API of the Skulk node to talk to.",
        ),
    ] = DEFAULT_API_URL,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print raw JSON responses (for scripts).")
    ] = False,
    operator_mode: Annotated[
        bool,
        typer.Option(
            "--operator",
            help="Send the command to the gateway this CLI is paired with (`skulk operator "
            "connect`), over its pinned TLS operator listener, instead of --api-url.",
        ),
    ] = False,
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the Skulk version and exit.",
        ),
    ] = False,
) -> None:
    """Skulk joins your machines into one LLM inference cluster.

    With no command, `skulk` runs this machine's node, exactly like `skulk serve`.
    """
    from skulk_cli.context import CliContext  # noqa: PLC0415 (not needed for --help)

    ctx.obj = CliContext(
        api_url=api_url.rstrip("/"), json_output=json_output, operator=operator_mode
    )
    if ctx.invoked_subcommand is None:
        if operator_mode:
            raise typer.BadParameter("give a command to send, e.g. `skulk --operator status`")
        from skulk_cli.commands import serve  # noqa: PLC0415 (lazy, as every command)

        serve.exec_daemon(serve.NodeOptions())


def main() -> None:
    """Console-script entry point."""
    app(prog_name=PROG_NAME)
