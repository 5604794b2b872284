"""`skulk models ...`: the model catalog."""

from __future__ import annotations

import typer

from skulk_cli import console, render, views
from skulk_cli.context import CliContext, JsonFlag, node_client

app = typer.Typer(help="Browse the models the cluster knows about.", no_args_is_help=True)


@app.command("list")
def list_models(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """List the catalog: model id, source, whether installed, context length, size."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        listing = client.models()
        if cli.wants_json(json_output):
            console.emit_json(listing)
            return
        console.show(render.models(views.parse(listing, views.ModelList, "/v1/models")))
