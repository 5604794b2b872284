"""`skulk connectivity`: how this node is reached: its LAN and tailnet URLs, the one to
prefer, the operator URL a phone pairs with, and Tailscale's state (here or on
another member)."""

from __future__ import annotations

from typing import Annotated

import typer

from skulk_cli import console, render_ops
from skulk_cli.context import CliContext, JsonFlag, node_client
from skulk_cli.views import parse
from skulk_core.cluster.remote_access import RemoteAccess, TailscaleStatus


def connectivity(
    ctx: typer.Context,
    node: Annotated[
        str | None,
        typer.Option("--node", help="Show this member's Tailscale state instead of this node's."),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Show how this node is reached: LAN and tailnet URLs, the preferred one, the
    operator URL, and whether Tailscale runs (`--node`: on another member)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw_access = client.remote_access() if node is None else None
        raw_tailscale = client.tailscale(node)
    if cli.wants_json(json_output):
        console.emit_json({"remoteAccess": raw_access, "tailscale": raw_tailscale})
        return
    access = None if raw_access is None else parse(raw_access, RemoteAccess, "remote access")
    tailscale = parse(raw_tailscale, TailscaleStatus, "tailscale")
    console.show(render_ops.connectivity(access, tailscale, node))
