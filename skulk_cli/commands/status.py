"""`skulk status`: the node, the cluster's memory and health, instances, runners."""

from __future__ import annotations

import typer

from skulk_cli import console
from skulk_cli.context import CliContext, JsonFlag, WideFlag, node_client


def status(ctx: typer.Context, json_output: JsonFlag = False, wide: WideFlag = False) -> None:
    """Show this node and the cluster it sees: memory, health, instances, runners.

    Instance and runner ids show as their shortest unique prefix (at least 8
    characters, as git shortens hashes); `--wide` shows them whole.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        identity = client.node_identity()
        state = client.state()
        if cli.wants_json(json_output):
            console.emit_json({"identity": identity, "state": state})
            return
        # Rendered only with an answer to render: a refusal needs no tables.
        from skulk_cli import render, views  # noqa: PLC0415

        console.show(
            render.status(
                views.parse(identity, views.NodeIdentity, "/node/identity"),
                views.parse(state, views.ClusterState, "/state"),
                wide=wide,
            )
        )
