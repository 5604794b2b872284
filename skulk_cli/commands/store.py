"""`skulk store ...`: the cluster's model store, from any node.

``status`` shows whether the store is configured and reachable, its disk and what it
holds (and on which nodes copies are); ``downloads`` lists the store's pending,
active and failed downloads (``--watch`` draws a progress bar for each until none is
active); ``rm`` deletes a model from the store and so from every node; ``purge``
drops the copies nodes staged from the store, never the store's own copy.
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
from skulk_cli.context import CliContext, JsonFlag, node_client

app = typer.Typer(help="The cluster's model store.", no_args_is_help=True)

POLL_SECONDS: Final = 0.5
ACTIVE: Final = frozenset({"pending", "in_progress"})

ModelArg = Annotated[str, typer.Argument(help="Model id (a Hugging Face owner/name).")]
JsonObject = dict[str, object]


@app.command("status")
def status(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Whether the store is reachable, its disk, and the models it holds."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        health = client.store_health()
        registry = client.store_registry() if health.get("reachable") else {}
    if cli.wants_json(json_output):
        console.emit_json({"health": health, "registry": registry})
        return
    facts = Table(title="Model store", show_header=False)
    facts.add_column("fact")
    facts.add_column("value")
    nodes = health.get("store_nodes")
    reachable = bool(health.get("reachable"))
    facts.add_row("store nodes", ", ".join(map(str, nodes)) if isinstance(nodes, list) else "-")
    facts.add_row("reachable", "yes" if reachable else f"no: {health.get('error') or ''}")
    if reachable:
        facts.add_row("store path", str(health.get("store_path", "-")))
        facts.add_row(
            "disk",
            f"{_size(health.get('free_bytes'))} free of {_size(health.get('total_bytes'))}",
        )
    console.show(facts)
    entries = registry.get("entries")
    rows = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    if not reachable:
        raise typer.Exit(1)
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
        revision = entry.get("source_revision")
        cached = entry.get("cached_on_nodes")
        copies = [c for c in cached if isinstance(c, dict)] if isinstance(cached, list) else []
        table.add_row(
            str(entry.get("model_id", "")),
            str(revision)[:12] if revision else "-",
            str(entry.get("file_count", "-")),
            _size(entry.get("total_bytes")),
            ", ".join(f"{c.get('node_id')} ({c.get('location_kind')})" for c in copies) or "-",
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
        listing = client.store_downloads()
        if watch and not cli.wants_json(json_output):
            listing = _watch(client, listing)
    if cli.wants_json(json_output):
        console.emit_json(listing)
        return
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
        fraction = row.get("progress")
        done = float(fraction) if isinstance(fraction, (int, float)) else 0.0
        table.add_row(
            str(row.get("modelId", "")),
            str(row.get("status", "")),
            Group(ProgressBar(total=1.0, completed=done, width=20), Text(f"{done:.0%}")),
            f"{_size(row.get('downloadedBytes'))} / {_size(row.get('totalBytes'))}",
            str(row.get("error") or ""),
        )
    console.show(table)


def _watch(client: SkulkClient, listing: list[JsonObject]) -> list[JsonObject]:
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
                model_id = str(row.get("modelId", ""))
                total = _int(row.get("totalBytes")) or None
                if model_id not in tasks:
                    tasks[model_id] = bars.add_task(model_id, total=total)
                bars.update(
                    tasks[model_id], completed=_int(row.get("downloadedBytes")), total=total
                )
            if not any(str(row.get("status")) in ACTIVE for row in listing):
                return listing
            time.sleep(POLL_SECONDS)
            listing = client.store_downloads()


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
        answer = client.purge_staging(model)
    if cli.wants_json(json_output):
        console.emit_json(answer)
        return
    console.show(Text(str(answer.get("message", "Purge ordered."))))
    console.note(Text(f"command {answer.get('commandId')}", style="dim"))


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def _size(value: object) -> str:
    if not isinstance(value, int):
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
