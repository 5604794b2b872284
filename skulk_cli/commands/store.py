"""`skulk store ...`: the cluster's model store, from any node.

``status`` shows whether the store is configured and reachable, its disk and what it
holds (and on which nodes copies are); ``downloads`` lists the store's pending,
active and failed downloads (``--watch`` draws a progress bar for each until none is
active); ``rm`` deletes a model from the store and so from every node; ``purge``
drops the copies nodes staged from the store, never the store's own copy;
``optimize`` and ``optimize-status`` (:mod:`skulk_cli.commands.store_optimize`) run
and follow an OptiQ mixed-precision requantization of a stored GGUF.
"""

from __future__ import annotations

import time
from typing import Annotated, Final

import typer
from rich.console import Console, Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from skulk_cli import console
from skulk_cli.client import SkulkClient
from skulk_cli.commands.store_optimize import optimize, optimize_status
from skulk_cli.context import CliContext, JsonFlag, node_client
from skulk_cli.views import parse
from skulk_core.store.answers import PurgeOrdered, StoreDownload, StoreHealth, StoreRegistry

app = typer.Typer(help="The cluster's model store.", no_args_is_help=True)

POLL_SECONDS: Final = 0.5
ACTIVE: Final = frozenset({"pending", "in_progress"})

ModelArg = Annotated[str, typer.Argument(help="Model id (a Hugging Face owner/name).")]
app.command("optimize")(optimize)
app.command("optimize-status")(optimize_status)
JsonObject = dict[str, object]


@app.command("status")
def status(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Whether the store is reachable, its disk, and the models it holds."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw_health = client.store_health()
        health = parse(raw_health, StoreHealth, "store health")
        raw_registry = client.store_registry() if health.reachable else {}
    if cli.wants_json(json_output):
        console.emit_json({"health": raw_health, "registry": raw_registry})
        return
    facts = Table(title="Model store", show_header=False)
    facts.add_column("fact")
    facts.add_column("value")
    facts.add_row("store nodes", ", ".join(health.store_nodes))
    error = health.error if isinstance(health.error, str) else ""
    facts.add_row("reachable", "yes" if health.reachable else f"no: {error}")
    if health.reachable:
        path = health.store_path if isinstance(health.store_path, str) else "-"
        facts.add_row("store path", path)
        facts.add_row("disk", f"{_size(health.free_bytes)} free of {_size(health.total_bytes)}")
    console.show(facts)
    if not health.reachable:
        raise typer.Exit(1)
    rows = parse(raw_registry, StoreRegistry, "store registry").entries
    if not rows:
        console.show(Text("The store holds no models.", style="dim"))
        return
    table = Table(title="Stored models")
    table.add_column("Model", overflow="fold")
    table.add_column("Revision")
    table.add_column("Files", justify="right")
    table.add_column("Size", justify="right")
    table.add_column("Copies on", overflow="fold")
    for entry in rows:
        revision = entry.source_revision
        table.add_row(
            entry.model_id,
            revision[:12] if revision else "-",
            str(entry.file_count),
            _size(entry.total_bytes),
            ", ".join(f"{c.node_id} ({c.location_kind})" for c in entry.cached_on_nodes) or "-",
        )
    console.show(table)


@app.command("downloads")
def downloads(
    ctx: typer.Context,
    watch: Annotated[
        bool, typer.Option("--watch", help="Draw progress bars until no download is active.")
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """The store's pending, active and failed downloads (failed ones say why)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.store_downloads()
        if cli.wants_json(json_output):
            console.emit_json(raw)
            return
        listing = _downloads(raw)
        if watch:
            listing = _watch(client, listing)
    if not listing:
        console.show(Text("No store downloads.", style="dim"))
        return
    table = Table(title="Store downloads")
    table.add_column("Model", overflow="fold")
    table.add_column("Status")
    table.add_column("Progress")
    table.add_column("Bytes", justify="right")
    table.add_column("Error", overflow="fold")
    for row in listing:
        table.add_row(
            row.model_id,
            row.status,
            Group(
                ProgressBar(total=1.0, completed=row.progress, width=20),
                Text(f"{row.progress:.0%}"),
            ),
            f"{_size(row.downloaded_bytes)} / {_size(row.total_bytes)}",
            row.error or "",
        )
    console.show(table)


def _downloads(raw: list[JsonObject]) -> list[StoreDownload]:
    return parse(raw, list[StoreDownload], "store downloads")


def _watch(client: SkulkClient, listing: list[StoreDownload]) -> list[StoreDownload]:
    """Redraw a bar per download (on stderr) until none is pending or in progress."""
    from rich.progress import (  # noqa: PLC0415 - only --watch draws bars
        BarColumn,
        DownloadColumn,
        Progress,
        TaskID,
        TextColumn,
        TransferSpeedColumn,
    )

    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=Console(stderr=True),
    )
    tasks: dict[str, TaskID] = {}
    with bars:
        while True:
            for row in listing:
                total = row.total_bytes or None
                if row.model_id not in tasks:
                    tasks[row.model_id] = bars.add_task(row.model_id, total=total)
                bars.update(tasks[row.model_id], completed=row.downloaded_bytes, total=total)
            if not any(row.status in ACTIVE for row in listing):
                return listing
            time.sleep(POLL_SECONDS)
            listing = _downloads(client.store_downloads())


@app.command("rm")
def remove(ctx: typer.Context, model_id: ModelArg, json_output: JsonFlag = False) -> None:
    """Delete a model from the store; every node drops its staged copy too."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        answer = client.delete_store_model(model_id)
    if cli.wants_json(json_output):
        console.emit_json(answer)
        return
    console.show(Text(f"Deleted {model_id} from the store; nodes drop their copies."))


@app.command("purge")
def purge(
    ctx: typer.Context,
    model: Annotated[
        str | None, typer.Option("--model", help="Only this model's staged copies.")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Drop the copies nodes staged from the store (the store keeps its own)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.purge_staging(model)
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    answer = parse(raw, PurgeOrdered, "purge")
    console.show(Text(answer.message))
    console.note(Text(f"command {answer.command_id}", style="dim"))


def _size(value: object) -> str:
    if not isinstance(value, int):
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
