"""`skulk diagnostics cancel|telemetry|envelopes`: act on a stuck runner, and read the
node's telemetry transport and performance envelopes."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from skulk_cli import console
from skulk_cli.client import SkulkApiError
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client
from skulk_cli.ops_views import TelemetryPreviewView
from skulk_cli.views import parse
from skulk_core.diagnostics.answers import (
    CancelAnswer,
    ClusterEnvelopes,
    NodeEnvelopes,
    TelemetryReport,
)


def cancel(
    ctx: typer.Context,
    runner: Annotated[
        str,
        typer.Argument(
            metavar="RUNNER", help="The runner's id (`skulk diagnostics node` lists them)."
        ),
    ],
    *,
    task: Annotated[
        str | None,
        typer.Option("--task", help="The task to cancel (default: the runner's one running task)."),
    ] = None,
    node: Annotated[
        str | None,
        typer.Option("--node", help="The member the runner runs on (default: this node)."),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Ask a runner to cancel one task, cooperatively: its generation stops at the next
    token and the request ends as cancelled; the runner keeps serving.

    Exits 1 when the node has no such runner, or the runner no such task.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        try:
            raw = client.cancel_runner_task(runner, task, node)
        except SkulkApiError as exc:
            if exc.status != 404:
                raise
            console.error(exc.message, hint="`skulk diagnostics node` lists runners and tasks.")
            raise typer.Exit(EXIT_REFUSED) from None
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    answer = parse(raw, CancelAnswer, "runner cancel")
    console.show(Text(f"Asked runner {answer.runner_id} to cancel task {answer.task_id}."))


def telemetry(
    ctx: typer.Context,
    preview: Annotated[
        bool,
        typer.Option(
            "--preview",
            help="Show field-telemetry consent and the batch that would be sent next instead.",
        ),
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """This node's telemetry transport: queue capacities and depth, publishes, drops
    and failures (`--preview`: what field telemetry would send, nothing sent)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.telemetry_preview() if preview else client.telemetry_transport()
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    # NOTE: render_ops (with the plugin proposal types it renders) loads here, not
    # with the module: every `skulk diagnostics` command imports this one.
    from skulk_cli import render_ops  # noqa: PLC0415

    if preview:
        view = parse(raw, TelemetryPreviewView, "telemetry preview")
        console.show(render_ops.telemetry_preview(view))
        return
    console.show(render_ops.telemetry(parse(raw, TelemetryReport, "telemetry")))


def envelopes(
    ctx: typer.Context,
    cluster: Annotated[
        bool, typer.Option("--cluster", help="Every member's envelopes, not only this node's.")
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Throughput and first-token latency against concurrency, per model: where adding
    concurrent requests stops adding throughput (the knee)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.performance_envelopes(cluster=cluster)
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    from skulk_cli import render_ops  # noqa: PLC0415 (as in telemetry)

    if cluster:
        console.show(render_ops.cluster_envelopes(parse(raw, ClusterEnvelopes, "envelopes")))
    else:
        answer = parse(raw, NodeEnvelopes, "envelopes")
        console.show(render_ops.envelopes(answer.node_id, answer.envelopes))
