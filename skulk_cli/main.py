"""The `skulk` command: the Typer app, its global options and the entry point."""

from __future__ import annotations

from typing import Annotated

import typer
from typer._click.core import Context as ClickContext
from typer._completion_classes import completion_init
from typer.core import TyperOption

from skulk_cli.client import DEFAULT_API_URL
from skulk_cli.commands import (
    bench,
    chat,
    config,
    connectivity,
    diagnostics,
    diagnostics_jobs,
    image,
    instances,
    logs,
    media_jobs,
    models,
    operator,
    placement,
    plugin_jobs,
    plugins,
    registry,
    restart,
    run,
    serve,
    speech,
    status,
    steward,
    store,
    store_jobs,
    top,
    trace,
)
from skulk_cli.context import CliContext
from skulk_core.version import SKULK_VERSION

PROG_NAME = "skulk"

# NOTE: Typer registers its shell-completion classes only when it adds its
# --install-completion options, which this app leaves out. Without them a request
# from the committed completion scripts (completions/, which Typer's classes
# generate) would reach click's stock classes, which speak another protocol.
completion_init()


# NOTE: Typer 0.29's rich help prints a flag's type as `<bool>` (`--json <bool>`),
# which reads as if the flag took a value. A flag takes none: show no type for it.
# Wrapped here, once, for every command (others' modules too) and the man pages.
_display_type_rich = TyperOption.display_type_rich


def _flag_without_type(self: TyperOption, ctx: ClickContext) -> str | None:
    if self.is_flag and self.metavar is None:
        return None
    return _display_type_rich(self, ctx)


setattr(TyperOption, "display_type_rich", _flag_without_type)  # noqa: B010 (a method, patched once)

app = typer.Typer(
    name=PROG_NAME,
    # Completions are generated into completions/ (scripts/gen_cli_docs.py) and
    # packaged; an installer that edits shell rc files is not wanted.
    add_completion=False,
    pretty_exceptions_show_locals=False,
    # Help paragraphs reflow to the terminal; `code` spans render as code.
    rich_markup_mode="markdown",
)
app.command("serve")(serve.serve)
app.command("status")(status.status)
app.add_typer(models.app, name="models")
app.add_typer(registry.app, name="registry")
app.add_typer(store.app, name="store")
app.add_typer(plugins.app, name="plugins")
app.command("previews")(placement.previews)
app.command("place")(placement.place)
app.add_typer(instances.app, name="instances")
app.command("run")(run.run)
app.command("chat")(chat.chat)
app.command("bench")(bench.bench)
app.add_typer(config.app, name="config")
app.add_typer(operator.app, name="operator")
app.command("doctor")(diagnostics.doctor)
app.add_typer(diagnostics.app, name="diagnostics")
app.command("restart")(restart.restart)
app.command("logs")(logs.logs)
app.add_typer(trace.app, name="trace")
app.command("top")(top.top)
app.command("say")(speech.say)
app.command("transcribe")(speech.transcribe)
app.add_typer(media_jobs.video_app, name="video")
app.add_typer(media_jobs.music_app, name="music")
app.command("voices")(speech.voices)
# The operational jobs (issue 40): store transfers, runner cancel, telemetry,
# envelopes, connectivity, plugin proposals, setup operations and grants.
store.app.command("download")(store_jobs.download)
store.app.command("cancel")(store_jobs.cancel)
store.app.command("storage")(store_jobs.storage)
store.app.command("reconciliation")(store_jobs.reconciliation)
diagnostics.app.command("cancel")(diagnostics_jobs.cancel)
diagnostics.app.command("telemetry")(diagnostics_jobs.telemetry)
diagnostics.app.command("envelopes")(diagnostics_jobs.envelopes)
app.command("connectivity")(connectivity.connectivity)
plugins.app.add_typer(plugin_jobs.proposals_app, name="proposals")
plugins.app.add_typer(plugin_jobs.setup_app, name="setup")
plugins.app.add_typer(plugin_jobs.grants_app, name="grants")
app.command("ask")(steward.ask)
app.add_typer(steward.app, name="steward")
app.command("image")(image.image)


def _print_version(value: bool) -> None:
    if value:
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
    ctx.obj = CliContext(
        api_url=api_url.rstrip("/"), json_output=json_output, operator=operator_mode
    )
    if ctx.invoked_subcommand is None:
        if operator_mode:
            raise typer.BadParameter("give a command to send, e.g. `skulk --operator status`")
        serve.exec_daemon(serve.NodeOptions())


def main() -> None:
    """Console-script entry point."""
    app(prog_name=PROG_NAME)
