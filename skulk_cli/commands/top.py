"""`skulk top`: the cluster live: nodes, instances, runners and tokens per second."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table

from skulk_cli import console, render, views
from skulk_cli.client import SkulkClient
from skulk_cli.context import CliContext, WideFlag, node_client

if TYPE_CHECKING:
    from prometheus_client.samples import Sample

Counters = dict[str, float]


def top(
    ctx: typer.Context,
    interval: Annotated[
        float, typer.Option("--interval", min=0.2, help="Seconds between refreshes.")
    ] = 1.0,
    once: Annotated[
        bool, typer.Option("--once", help="Print one refresh (two readings apart) and exit.")
    ] = False,
    wide: WideFlag = False,
) -> None:
    """Watch the cluster live: members, memory, instances, runners, and this node's
    tokens per second and in-flight generations. Ctrl-C ends it.

    Ids show as unique prefixes to fit the terminal; `--wide` shows them whole."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        previous = _completion_tokens(_samples(client.metrics_text()))
        started = time.monotonic()
        if once:
            time.sleep(interval)
            console.show(_frame(client, previous, time.monotonic() - started, wide)[0])
            return
        try:
            with Live(console=None, refresh_per_second=4, screen=False) as live:
                while True:
                    time.sleep(interval)
                    now = time.monotonic()
                    renderable, previous = _frame(client, previous, now - started, wide)
                    started = now
                    live.update(renderable)
        except KeyboardInterrupt:
            return


def _frame(
    client: SkulkClient, previous: Counters, seconds: float, wide: bool
) -> tuple[RenderableType, Counters]:
    identity = views.parse(client.node_identity(), views.NodeIdentity, "/node/identity")
    state = views.parse(client.state(), views.ClusterState, "/state")
    samples = _samples(client.metrics_text())
    current = _completion_tokens(samples)
    return Group(
        render.status(identity, state, wide=wide), _throughput(previous, current, seconds, samples)
    ), current


def _samples(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition, parsed once per refresh."""
    # NOTE: imported here (a quarter second) so `skulk --help` and the other
    # commands start without it.
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def _completion_tokens(samples: Sequence[Sample]) -> Counters:
    """Completion tokens so far, per model, from ``skulk_tokens_total``."""
    return {
        sample.labels.get("model", ""): sample.value
        for sample in samples
        if sample.name == "skulk_tokens_total" and sample.labels.get("kind") == "completion"
    }


def _gauge(samples: Sequence[Sample], name: str) -> float | None:
    return next((sample.value for sample in samples if sample.name == name), None)


def _throughput(
    previous: Mapping[str, float],
    current: Mapping[str, float],
    seconds: float,
    samples: Sequence[Sample],
) -> Table:
    in_flight = _gauge(samples, "skulk_in_flight_sequences")
    table = Table(title=f"This node: {int(in_flight or 0)} generation(s) in flight")
    table.add_column("model")
    table.add_column("tokens/s", justify="right")
    table.add_column("tokens", justify="right")
    for model in sorted(current):
        rate = max(0.0, current[model] - previous.get(model, 0.0)) / max(seconds, 1e-6)
        table.add_row(model, f"{rate:.1f}", f"{int(current[model])}")
    return table
