"""`skulk doctor` and `skulk diagnostics ...`: why a node or the cluster misbehaves."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import msgspec
import typer

from skulk_cli import console, render_diagnostics
from skulk_cli.client import JsonObject
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, WideFlag, node_client
from skulk_cli.views import parse
from skulk_core.diagnostics.answers import Capture, ClusterBundles, Timeline
from skulk_core.diagnostics.bundle import NodeBundle

app = typer.Typer(
    help="Diagnostics of this node or the cluster: bundles, the runner timeline, captures.",
    no_args_is_help=True,
)

NodeArg = Annotated[
    str | None,
    typer.Argument(
        metavar="[NODE]",
        help="A member's node id (`skulk diagnostics cluster` lists them); default this node.",
        show_default=False,
    ),
]


def doctor(ctx: typer.Context, node: NodeArg = None, json_output: JsonFlag = False) -> None:
    """Run the node doctor: engine build, disk, memory, peers, cluster key, versions,
    clocks, ports and stuck runners, each with a fix.

    Exits 1 when any check fails, so scripts can act on it.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        bundle = parse(client.diagnostics(node), NodeBundle, "diagnostics")
    if cli.wants_json(json_output):
        console.emit_json(msgspec.to_builtins(bundle.doctor))
    else:
        console.show(render_diagnostics.doctor(bundle))
    if render_diagnostics.failed(bundle):
        raise typer.Exit(EXIT_REFUSED)


@app.command("node")
def node_bundle(ctx: typer.Context, node: NodeArg = None, json_output: JsonFlag = False) -> None:
    """Show a node's bundle: runtime, runners, processes and doctor (`--json`: all of it)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.diagnostics(node)
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    console.show(render_diagnostics.node(parse(raw, NodeBundle, "diagnostics")))


@app.command("cluster")
def cluster(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Ask every member for its bundle; unreachable members are listed as such."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.cluster_diagnostics()
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    console.show(render_diagnostics.cluster(parse(raw, ClusterBundles, "cluster diagnostics")))


@app.command("timeline")
def timeline(ctx: typer.Context, json_output: JsonFlag = False, wide: WideFlag = False) -> None:
    """Every rank's runner phases, merged by time: where a distributed load hangs.

    Ids show as unique prefixes and times as times of day; `--wide` shows both whole.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.cluster_timeline()
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    console.show(render_diagnostics.timeline(parse(raw, Timeline, "timeline"), wide=wide))


@app.command("capture")
def capture(
    ctx: typer.Context,
    *,
    runner: Annotated[
        str | None, typer.Option("--runner", help="The runner to capture.", show_default=False)
    ] = None,
    task: Annotated[
        str | None, typer.Option("--task", help="Only this task's entries.", show_default=False)
    ] = None,
    samples: Annotated[
        bool, typer.Option("--samples", help="Sample the processes' threads too.")
    ] = False,
    seconds: Annotated[
        float, typer.Option("--seconds", min=0.0, max=10.0, help="How long to sample.")
    ] = 1.0,
    node: Annotated[
        str | None,
        typer.Option("--node", help="Capture on this member instead.", show_default=False),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Where to save it (default skulk-capture-NODE-TIME.json here; - prints it).",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Capture a bounded snapshot (flight recorders, memory, thread samples) and save it
    as JSON for a bug report; `--json` or `-o -` prints it instead."""
    cli = CliContext.of(ctx)
    body: JsonObject = {"includeProcessSamples": samples, "sampleDurationSeconds": seconds}
    if runner is not None:
        body["runnerId"] = runner
    if task is not None:
        body["taskId"] = task
    with node_client(cli) as client:
        raw = client.capture(body, node)
    if cli.wants_json(json_output) or str(output) == "-":
        console.emit_json(raw)
        return
    taken = parse(raw, Capture, "capture")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = output or Path(f"skulk-capture-{taken.node_id[-8:]}-{stamp}.json")
    document = msgspec.json.format(msgspec.json.encode(raw), indent=2) + b"\n"
    try:
        # Never over another file: a capture is evidence, and so may be what is there.
        with path.open("xb") as file:
            file.write(document)
    except OSError as exc:
        console.error(f"could not save the capture to {path}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_REFUSED) from None
    console.show(render_diagnostics.capture(taken, str(path), len(document)))
