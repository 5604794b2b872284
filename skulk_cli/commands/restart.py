"""`skulk restart NODE`: restart a node in place, named however `skulk status` shows it."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from skulk_cli import console, views
from skulk_cli.client import JsonObject
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client

# A remote restart is asked of the target through the API node, one attempt per URL.
RESTART_TIMEOUT_SECONDS = 30.0

NodeArg = Annotated[
    str | None,
    typer.Argument(
        metavar="[NODE]",
        help="The node's id, stable install id, or friendly name (`skulk status` shows "
        "them); may be left out when the cluster is this one node.",
        show_default=False,
    ),
]


class UnknownNode(Exception):
    """NODE names no node, or several."""


def resolve(state: views.ClusterState, node: str) -> tuple[str | None, str | None]:
    """``(node_install_id, node_id)`` to send for ``node``: the stable install id when
    the node reports one (it survives the node's restart), else its session id."""
    identities = state.node_identities
    if node in identities:
        install = identities[node].node_install_id
        return (install, None) if install else (None, node)
    by_install = [n for n, info in identities.items() if info.node_install_id == node]
    if by_install:
        return node, None
    named = sorted(n for n, info in identities.items() if info.friendly_name == node)
    if len(named) == 1:
        return resolve(state, named[0])
    if named:
        raise UnknownNode(f"{len(named)} nodes are named {node!r} ({', '.join(named)}); give an id")
    raise UnknownNode(f"no node is named {node!r}; `skulk status` lists the cluster's nodes")


def restarted(answer: JsonObject, name: str | None) -> Text:
    """One line: which node restarts, and whether this node or the API node asked it."""
    node_id = str(answer.get("node_id", ""))
    shown = f"{name} ({node_id})" if name else node_id
    verb = "Restart sent to" if answer.get("status") == "restart_sent" else "Restarting"
    return Text.assemble(
        (f"{verb} ", "bold"),
        (shown, "cyan"),
        ": it keeps its id and placements; generations in flight are interrupted.",
    )


def only_node(state: views.ClusterState) -> str:
    """The one node of a single-node cluster, for `skulk restart` without NODE."""
    nodes = sorted(state.node_identities)
    if len(nodes) == 1:
        return nodes[0]
    names = ", ".join(state.node_name(n) or n for n in nodes) or "none yet"
    raise typer.BadParameter(
        f"the cluster has {len(nodes)} nodes ({names}); name the one to restart",
        param_hint="NODE",
    )


def restart(ctx: typer.Context, node: NodeArg = None, json_output: JsonFlag = False) -> None:
    """Restart a node in place: a graceful stop, then the same process starts again.

    The node keeps its id and its placed instances (their runners load again); work in
    flight on it is interrupted. It is named by its stable install id, so the request
    reaches the node that is live now. Without NODE, on a cluster of one node, that
    node restarts.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        state = views.parse(client.state(), views.ClusterState, "/state")
        try:
            install_id, node_id = resolve(state, node or only_node(state))
        except UnknownNode as exc:
            console.error(str(exc))
            raise typer.Exit(EXIT_REFUSED) from None
        answer = client.restart(
            node_install_id=install_id, node_id=node_id, timeout=RESTART_TIMEOUT_SECONDS
        )
    if cli.wants_json(json_output):
        console.emit_json(answer)
        return
    console.show(restarted(answer, state.node_name(str(answer.get("node_id", "")))))
