"""`skulk instances ...`: the placed model instances.

Every command that takes an instance id takes a unique prefix of one too (what
`skulk instances list` shows at its start is enough); an ambiguous prefix lists the
instances it could mean.
"""

from __future__ import annotations

from typing import Annotated

import typer

from skulk_cli import console, render, views
from skulk_cli.client import SkulkClient
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, WideFlag, node_client
from skulk_cli.instance_ids import AmbiguousInstanceId, resolve_instance_id

app = typer.Typer(help="List, inspect and remove placed model instances.", no_args_is_help=True)

InstanceArg = Annotated[
    str,
    typer.Argument(
        metavar="ID",
        help="Instance id, or a unique prefix of one, as `skulk instances list` shows it.",
        show_default=False,
    ),
]


def resolve(client: SkulkClient, given: str) -> str:
    """The full id ``given`` stands for; an ambiguous prefix ends the command (exit 1)."""
    state = views.parse(client.state(), views.ClusterState, "/state")
    try:
        return resolve_instance_id(given, state)
    except AmbiguousInstanceId as exc:
        console.error(str(exc), hint="Type more of the id.")
        raise typer.Exit(EXIT_REFUSED) from None


@app.command("list")
def list_instances(
    ctx: typer.Context, json_output: JsonFlag = False, wide: WideFlag = False
) -> None:
    """List placed instances: model, each node's runner status, context window.

    Recent placement failures follow the table. `--json` prints the node's
    `instances`, `runners` and `instanceFailures` from its state.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.state()
        if cli.wants_json(json_output):
            console.emit_json(
                {
                    key: raw.get(key, default)
                    for key, default in (
                        ("instances", {}),
                        ("runners", {}),
                        ("instanceFailures", []),
                    )
                }
            )
            return
        state = views.parse(raw, views.ClusterState, "/state")
        console.show(render.instances(state, wide=wide))


@app.command("show")
def show(ctx: typer.Context, instance_id: InstanceArg, json_output: JsonFlag = False) -> None:
    """Show one instance: its model, context window, and each node's layers and runner.

    `--json` prints the node's answer: the instance and its runners' statuses.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        instance_id = resolve(client, instance_id)
        raw = client.instance(instance_id)
        if cli.wants_json(json_output):
            console.emit_json(raw)
            return
        detail = views.parse_instance(raw, f"/instance/{instance_id}")
        # For node names only: the instance speaks in node ids.
        state = views.parse(client.state(), views.ClusterState, "/state")
    console.show(render.instance(detail, state))


@app.command("rm")
def remove(ctx: typer.Context, instance_id: InstanceArg, json_output: JsonFlag = False) -> None:
    """Remove an instance: its runners stop and free their memory.

    Work in flight on the instance is interrupted. The model's files stay on disk
    (`skulk models rm` removes those).
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.delete_instance(resolve(client, instance_id))
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    console.show(
        render.instance_deleted(views.parse(raw, views.DeleteResponse, "DELETE /instance"))
    )


# The command's first name, kept for scripts; `rm` matches `models rm` and `store rm`.
app.command("delete", hidden=True, help="Same as `skulk instances rm`.")(remove)
