"""`skulk trace ...`: trace requests across the cluster and export them for Perfetto."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from skulk_cli import console
from skulk_cli.client import SkulkClient
from skulk_cli.context import CliContext, JsonFlag, WideFlag, node_client
from skulk_cli.render import short_id
from skulk_cli.short_ids import IdShortener
from skulk_cli.views import parse
from skulk_core.diagnostics.trace_answers import ClusterTraces, TraceStats

app = typer.Typer(
    help="Trace new requests on every node, list and show traces, export Chrome trace JSON.",
    no_args_is_help=True,
)

TaskArg = Annotated[
    str,
    typer.Argument(
        metavar="TASK",
        help="A traced task's id, or a prefix of it (`skulk trace list`).",
        show_default=False,
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


def _resolve(client: SkulkClient, task_id: str) -> str:
    """The full id of the one traced task ``task_id`` is a prefix of, as `trace list`
    shows it; an id no task starts with is sent as given (the node says it is unknown)."""
    traces = parse(client.traces(), ClusterTraces, "trace list").traces
    ids = {trace.task_id for trace in traces}
    if task_id in ids:
        return task_id
    matches = sorted(i for i in ids if i.startswith(task_id))
    if len(matches) > 1:
        raise typer.BadParameter(
            f"{task_id!r} begins {len(matches)} traced tasks' ids ({', '.join(matches)}); "
            "give more of it",
            param_hint="TASK",
        )
    return matches[0] if matches else task_id


@app.command("list")
def list_traces(ctx: typer.Context, json_output: JsonFlag = False, wide: WideFlag = False) -> None:
    """List traced tasks across the cluster, newest first.

    Task ids show as unique prefixes (which `trace show` and `trace export` take);
    `--wide` shows them whole.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        listing = client.traces()
    if cli.wants_json(json_output):
        console.emit_json(listing)
        return
    traces = parse(listing, ClusterTraces, "trace list").traces
    ids = IdShortener([trace.task_id for trace in traces], wide=wide)
    table = Table(title="Traces")
    for column in ("task", "model", "nodes", "spans"):
        table.add_column(column, no_wrap=column == "task")
    for trace in traces:
        table.add_row(
            ids(trace.task_id),
            trace.model_id,
            ", ".join(short_id(n) for n in trace.source_nodes),
            str(trace.span_count),
        )
    console.show(table)


@app.command("show")
def show(ctx: typer.Context, task_id: TaskArg, json_output: JsonFlag = False) -> None:
    """Show one task's timing summary, per span name, across the cluster."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        task_id = _resolve(client, task_id)
        raw = client.trace(task_id, "stats")
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    summary = parse(raw, TraceStats, "trace stats")
    table = Table(title=f"Trace {task_id}: {summary.total_ms} ms")
    for column in ("span", "count", "total ms", "max ms"):
        table.add_column(column)
    for name, entry in summary.spans.items():
        table.add_row(name, str(entry.count), str(entry.total_ms), str(entry.max_ms))
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
        task_id = _resolve(client, task_id)
        document = client.trace(task_id, "raw")
    target = output or Path(f"trace-{task_id}.json")
    target.write_text(json.dumps(document))
    console.note(f"Wrote {target}.")
