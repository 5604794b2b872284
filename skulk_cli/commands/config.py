"""`skulk config ...`: read and change the cluster's skulk.yaml through the node."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from skulk_cli import console, render_config, views
from skulk_cli.config_edit import ConfigKeyError, parse_value, set_path
from skulk_cli.context import CliContext, JsonFlag, node_client

app = typer.Typer(help="Show or change the cluster configuration.", no_args_is_help=True)


@app.command("show")
def show(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Show the configuration as dotted keys, then what is in effect on this node.

    The second table lists the ports, mDNS, peers, log level and file, and the
    directories the node runs with, each with where it came from: a command-line
    flag, an environment variable, skulk.yaml, or the default.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        response = client.config()
        if cli.wants_json(json_output):
            console.emit_json(response)
            return
        console.show(render_config.config(views.parse(response, views.ConfigResponse, "/config")))


@app.command("set")
def set_value(
    ctx: typer.Context,
    key: Annotated[
        str,
        typer.Argument(metavar="KEY", help="Dotted key, e.g. logging.level.", show_default=False),
    ],
    value: Annotated[
        str,
        typer.Argument(
            metavar="VALUE",
            help='New value; JSON when it parses (true, 8, null, ["a"]), else text.',
            show_default=False,
        ),
    ],
    json_output: JsonFlag = False,
) -> None:
    """Set one configuration key and save the whole configuration on the node.

    The node validates the result; a refused value changes nothing.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        current = views.parse(client.config(), views.ConfigResponse, "/config")
        new = parse_value(value)
        try:
            edit = set_path(current.config, key, new)
        except ConfigKeyError as exc:
            raise typer.BadParameter(str(exc), param_hint="KEY") from None
        saved = client.put_config(edit.document)
        if cli.wants_json(json_output):
            console.emit_json(saved)
            return
        console.show(render_config.config_change(key, edit.old, new, existed=edit.existed))
        if key in {row.key for row in current.in_effect}:
            console.note(Text("The node reads it when it starts: `skulk restart` applies it."))
