"""`skulk trace ...`: trace requests across the cluster and export them for Perfetto."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from skulk_cli import console
from skulk_cli.context import CliContext, JsonFlag, node_client
from skulk_cli.render import short_id

app = typer.Typer(
    help="Trace new requests on every node, list and show traces, export Chrome trace JSON.",
    no_args_is_help=True,
)

TaskArg = Annotated[
    str,
    typer.Argument(
        metavar="TASK", help="A traced task's id (`skulk trace list`).", show_default=False
    ),
]


@app.command("on")
def on(ctx: typer.Context) -> None:
    """Trace every new request, cluster-wide (requests in flight are not)."""
    with node_client(CliContext.of(ctx)) as client:
        client.set_tracing(True)
    console.note("Tracing is on for new requests on every node.")


@app.command("off")
def off(ctx: typer.Context) -> None:
    """Stop tracing new requests; recorded traces stay until deleted or aged out."""
    with node_client(CliContext.of(ctx)) as client:
        client.set_tracing(False)
    console.note("Tracing is off.")


@app.command("list")
def list_traces(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """List traced tasks across the cluster, newest first."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        listing = client.traces()
    if cli.wants_json(json_output):
        console.emit_json(listing)
        return
    table = Table(title="Traces")
    for column in ("task", "model", "nodes", "spans"):
        table.add_column(column)
    traces = listing.get("traces")
    for trace in traces if isinstance(traces, list) else []:
        if not isinstance(trace, dict):
            continue
        nodes = trace.get("sourceNodes")
        table.add_row(
            str(trace.get("taskId")),
            str(trace.get("modelId")),
            ", ".join(short_id(str(n)) for n in (nodes if isinstance(nodes, list) else [])),
            str(trace.get("spanCount")),
        )
    console.show(table)


@app.command("show")
def show(ctx: typer.Context, task_id: TaskArg, json_output: JsonFlag = False) -> None:
    """Show one task's timing summary, per span name, across the cluster."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        summary = client.trace(task_id, "stats")
    if cli.wants_json(json_output):
        console.emit_json(summary)
        return
    table = Table(title=f"Trace {task_id}: {summary.get('totalMs')} ms")
    for column in ("span", "count", "total ms", "max ms"):
        table.add_column(column)
    spans = summary.get("spans")
    for name, entry in (spans if isinstance(spans, dict) else {}).items():
        if isinstance(entry, dict):
            row = (entry.get("count"), entry.get("totalMs"), entry.get("maxMs"))
            table.add_row(str(name), *(str(value) for value in row))
    console.show(table)


@app.command("export")
def export(
    ctx: typer.Context,
    task_id: TaskArg,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="File to write (default trace-TASK.json)."),
    ] = None,
) -> None:
    """Write one task's merged trace as Chrome trace JSON (open it in ui.perfetto.dev)."""
    with node_client(CliContext.of(ctx)) as client:
        document = client.trace(task_id, "raw")
    target = output or Path(f"trace-{task_id}.json")
    target.write_text(json.dumps(document))
    console.note(f"Wrote {target}.")
