"""The `skulk` commands, each imported only when it runs.

Importing every command module (their clients, renderers, TUF, the config schema)
took most of a second, which `skulk --help` and `skulk status` paid in full. Here
the root group knows each command by name, the module that defines it and the
one-line summary its help listing shows; a command's module is imported when the
command is invoked, completed or documented, never to list it.

:data:`COMMANDS` keeps the listing order Typer gave them when they were registered
eagerly: plain commands first, then the groups. ``tests/cli`` checks that each
summary is the first paragraph of the real command's help, so the two cannot drift.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

import typer
import typer.main
from typer._click.core import Command, Context
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """One root command: where it is defined, and what its help listing says."""

    name: str
    module: str
    """``skulk_cli.commands.<module>``."""
    attribute: str
    """The command's function, or (``group``) its Typer app."""
    summary: str
    """The first paragraph of its help, shown in ``skulk --help``."""
    group: bool = False


def _store_app() -> typer.Typer:
    from skulk_cli.commands import store, store_jobs  # noqa: PLC0415 (lazy: see module doc)

    # The operational jobs (issue 40): store transfers, runner cancel, telemetry,
    # envelopes, connectivity, plugin proposals, setup operations and grants.
    store.app.command("download")(store_jobs.download)
    store.app.command("cancel")(store_jobs.cancel)
    store.app.command("storage")(store_jobs.storage)
    store.app.command("reconciliation")(store_jobs.reconciliation)
    return store.app


def _diagnostics_app() -> typer.Typer:
    from skulk_cli.commands import diagnostics, diagnostics_jobs  # noqa: PLC0415 (lazy)

    diagnostics.app.command("cancel")(diagnostics_jobs.cancel)
    diagnostics.app.command("telemetry")(diagnostics_jobs.telemetry)
    diagnostics.app.command("envelopes")(diagnostics_jobs.envelopes)
    return diagnostics.app


def _plugins_app() -> typer.Typer:
    from skulk_cli.commands import plugin_jobs, plugins  # noqa: PLC0415 (lazy)

    plugins.app.add_typer(plugin_jobs.proposals_app, name="proposals")
    plugins.app.add_typer(plugin_jobs.setup_app, name="setup")
    plugins.app.add_typer(plugin_jobs.grants_app, name="grants")
    return plugins.app


_EXTENDED: Final[dict[tuple[str, str], Callable[[], typer.Typer]]] = {
    ("store", "app"): _store_app,
    ("diagnostics", "app"): _diagnostics_app,
    ("plugins", "app"): _plugins_app,
}
"""Groups whose subcommands live in a second module, added once when first loaded."""


def _c(name: str, module: str, attribute: str, summary: str) -> LazyCommand:
    return LazyCommand(name=name, module=module, attribute=attribute, summary=summary)


def _g(name: str, module: str, attribute: str, summary: str) -> LazyCommand:
    return LazyCommand(name=name, module=module, attribute=attribute, summary=summary, group=True)


COMMANDS: Final[tuple[LazyCommand, ...]] = (
    _c("serve", "serve", "serve", "Run this machine's Skulk node in the foreground."),
    _c(
        "status",
        "status",
        "status",
        "Show this node and the cluster it sees: memory, health, instances, runners.",
    ),
    _c(
        "previews",
        "placement",
        "previews",
        "Show where the cluster can run a model: nodes, layers, memory and context window.",
    ),
    _c(
        "place",
        "placement",
        "place",
        "Place a model on the cluster and wait until it is ready to answer.",
    ),
    _c(
        "run",
        "run",
        "run",
        "Chat with a model in one step: add, download and place it first if needed.",
    ),
    _c("chat", "chat", "chat", "Chat with a placed model; the reply prints as it is generated."),
    _c("bench", "bench", "bench", "Measure how fast a placed model generates on the node."),
    _c(
        "doctor",
        "diagnostics",
        "doctor",
        "Run the node doctor: engine build, disk, memory, peers, cluster key, versions, "
        "clocks, ports and stuck runners, each with a fix.",
    ),
    _c(
        "restart",
        "restart",
        "restart",
        "Restart a node in place: a graceful stop, then the same process starts again.",
    ),
    _c(
        "logs",
        "logs",
        "logs",
        "Show this machine's node log: the last lines, or follow it with `-f`.",
    ),
    _c(
        "top",
        "top",
        "top",
        "Watch the cluster live: members, memory, instances, runners, and this node's tokens "
        "per second and in-flight generations. Ctrl-C ends it.",
    ),
    _c(
        "say",
        "speech",
        "say",
        "Synthesize TEXT with a placed text-to-speech model and write it to a file.",
    ),
    _c(
        "transcribe",
        "speech",
        "transcribe",
        "Transcribe a local audio FILE with a placed speech-to-text model.",
    ),
    _c("voices", "speech", "voices", "List the voices placed text-to-speech models declare."),
    _c(
        "connectivity",
        "connectivity",
        "connectivity",
        "Show how this node is reached: LAN and tailnet URLs, the preferred one, the operator "
        "URL, and whether Tailscale runs (`--node`: on another member).",
    ),
    _c(
        "ask",
        "steward",
        "ask",
        "Ask Skulk about its cluster: the tool steps stream dimmed, then the answer.",
    ),
    _c(
        "image",
        "image",
        "image",
        "Draw PROMPT with a placed image model and write the picture to a file.",
    ),
    _g("models", "models", "app", "Browse the models the cluster knows about."),
    _g(
        "registry",
        "registry",
        "app",
        "Publish a signed (TUF) model registry from card files; show a node's registry.",
    ),
    _g("store", "store", "app", "The cluster's model store."),
    _g(
        "plugins",
        "plugins",
        "app",
        "The node's installed plugins: list, show, enable and disable managed ones.",
    ),
    _g("instances", "instances", "app", "List, inspect and remove placed model instances."),
    _g("config", "config", "app", "Show or change the cluster configuration."),
    _g(
        "operator",
        "operator",
        "app",
        "Pair devices with this gateway, or use a gateway this CLI is paired with.",
    ),
    _g(
        "diagnostics",
        "diagnostics",
        "app",
        "Diagnostics of this node or the cluster: bundles, the runner timeline, captures.",
    ),
    _g(
        "trace",
        "trace",
        "app",
        "Trace new requests on every node, list and show traces, export Chrome trace JSON.",
    ),
    _g(
        "video",
        "media_jobs",
        "video_app",
        "Video jobs: create, follow, download and cancel renders.",
    ),
    _g(
        "music",
        "media_jobs",
        "music_app",
        "Music jobs: create, follow, download and cancel pieces.",
    ),
    _g(
        "steward",
        "steward",
        "app",
        "Skulk's own cognition (intelligent fabric): status and action proposals.",
    ),
)

_BY_NAME: Final = {command.name: command for command in COMMANDS}


@cache
def _typer_app(module: str, attribute: str) -> typer.Typer:
    extend = _EXTENDED.get((module, attribute))
    if extend is not None:
        return extend()
    app: typer.Typer = getattr(importlib.import_module(f"skulk_cli.commands.{module}"), attribute)
    return app


@cache
def load(name: str) -> Command:
    """The real click command for root command ``name`` (imports its module once),
    built as the root app builds it: the same markup mode and exception settings."""
    entry = _BY_NAME[name]
    holder = typer.Typer(
        add_completion=False, pretty_exceptions_show_locals=False, rich_markup_mode="markdown"
    )
    if entry.group:
        holder.add_typer(_typer_app(entry.module, entry.attribute), name=name)
    else:
        module = importlib.import_module(f"skulk_cli.commands.{entry.module}")
        function: Callable[..., Any] = getattr(module, entry.attribute)
        holder.command(name)(function)
    return typer.main.get_group(holder).commands[name]


def _listed(entry: LazyCommand) -> Command:
    """A stand-in that carries only what a help listing or completion shows."""
    return TyperCommand(name=entry.name, help=entry.summary)


class LazyGroup(TyperGroup):
    """The root group: its commands are :data:`COMMANDS`, loaded as they are used.

    NOTE: listing the commands (``--help``, completing a command name) asks
    ``get_command`` for every one; while a listing is being made it answers with
    stand-ins carrying the summary, so nothing is imported to list it."""

    _listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *(c.name for c in COMMANDS)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        entry = _BY_NAME.get(cmd_name)
        if entry is None:
            return super().get_command(ctx, cmd_name)
        return _listed(entry) if self._listing else load(cmd_name)

    def format_help(self, ctx: Context, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def shell_complete(self, ctx: Context, incomplete: str) -> list[Any]:
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False
