"""`skulk store optimize MODEL` and `skulk store optimize-status MODEL`: OptiQ.

``optimize`` asks the store host for a mixed-precision requantization of a stored
GGUF (``--target-bpw``, ``--candidate-bits``), then waits for it with a progress bar
(on stderr) unless ``--no-wait``; it exits 1 when the job fails. ``optimize-status``
shows one job's state. Both print the node's JSON with ``--json``.
"""

from __future__ import annotations

import time
from typing import Annotated, Final

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from skulk_cli import console
from skulk_cli.client import SkulkClient
from skulk_cli.context import CliContext, JsonFlag, node_client
from skulk_cli.views import parse
from skulk_core.store.optimize import (
    DEFAULT_CANDIDATE_BITS,
    DEFAULT_TARGET_BPW,
    OptimizeStarted,
    OptimizeStatus,
)

POLL_SECONDS: Final = 0.5
JsonObject = dict[str, object]

ModelArg = Annotated[str, typer.Argument(help="The stored model's id (owner/name).")]


def optimize(  # noqa: PLR0917 - typer passes options positionally
    ctx: typer.Context,
    model_id: ModelArg,
    target_bpw: Annotated[
        float,
        typer.Option("--target-bpw", help="Average bits per weight to aim for (nominal)."),
    ] = DEFAULT_TARGET_BPW,
    candidate_bits: Annotated[
        list[int] | None,
        typer.Option(
            "--candidate-bits",
            help="A width each tensor may take; repeat it (default: 4 and 8).",
        ),
    ] = None,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="Start the job and return at once.")
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Requantize a stored GGUF to mixed precision; the result is stored as its own model."""
    cli = CliContext.of(ctx)
    bits = list(candidate_bits) if candidate_bits else list(DEFAULT_CANDIDATE_BITS)
    body: JsonObject = {"target_bpw": target_bpw, "candidate_bits": bits}
    with node_client(cli) as client:
        raw = client.store_optimize(model_id, body)
        started = parse(raw, OptimizeStarted, "optimize")
        if no_wait:
            if cli.wants_json(json_output):
                console.emit_json(raw)
                return
            console.show(
                Text(
                    f"Optimizing {model_id} towards {started.target_bpw:g} bpw as "
                    f"{started.result_model_id}; follow it with "
                    f"`skulk store optimize-status {model_id}`."
                )
            )
            return
        raw_status = _wait(client, model_id, quiet=cli.wants_json(json_output))
    _finish(cli, raw_status, json_output)


def optimize_status(ctx: typer.Context, model_id: ModelArg, json_output: JsonFlag = False) -> None:
    """One optimization job's state, progress and result."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.store_optimize_status(model_id)
    _finish(cli, raw, json_output)


def _finish(cli: CliContext, raw: JsonObject, json_output: bool) -> None:
    job = parse(raw, OptimizeStatus, "optimize status")
    if cli.wants_json(json_output):
        console.emit_json(raw)
    else:
        console.show(_table(job))
    if job.status == "failed":
        raise typer.Exit(1)


def _wait(client: SkulkClient, model_id: str, *, quiet: bool) -> JsonObject:
    """Poll until the job ends, drawing one bar on stderr (none for ``--json``)."""
    from rich.progress import (  # noqa: PLC0415 - only a waiting command draws bars
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=quiet,
    )
    with bars:
        task = bars.add_task(f"optimizing {model_id}", total=1.0)
        while True:
            raw = client.store_optimize_status(model_id)
            job = parse(raw, OptimizeStatus, "optimize status")
            bars.update(task, completed=job.progress, description=job.message)
            if job.status != "running":
                return raw
            time.sleep(POLL_SECONDS)


def _table(job: OptimizeStatus) -> Table:
    table = Table(title=f"Optimization of {job.model_id}", show_header=False)
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    table.add_row("status", job.status)
    table.add_row("progress", f"{job.progress:.0%}")
    table.add_row("message", job.message)
    table.add_row("target", f"{job.target_bpw:g} bpw from {list(job.candidate_bits)} bits")
    table.add_row("result model", job.result_model_id)
    if job.achieved_bpw is not None:
        table.add_row("achieved", f"{job.achieved_bpw:g} bpw")
    if job.estimated_size_mb is not None:
        table.add_row("size", f"{job.estimated_size_mb:.1f} MiB")
    if job.result_path:
        table.add_row("file", job.result_path)
    if job.error:
        table.add_row("error", Text(job.error, style="red"))
    return table
