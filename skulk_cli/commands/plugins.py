"""`skulk plugins ...`: the node's installed plugins, through its plugin routes.

``list`` reads ``GET /v1/plugins``; ``show`` one managed installation; ``enable`` and
``disable`` submit a lifecycle operation (``activate`` of the selected release, or
``disable``) under the installation's current selection revision, then read that
operation until it settles; an uncertain answer is read back, never resubmitted.
``configure`` shows one installed node's ordinary settings
(``GET /v1/plugins/{plugin}/nodes/{node}/configuration``); ``--set key=value`` edits
them under the revision and schema digest it has just read (a changed node is refused
with 409, never overwritten); ``--credential ID`` reads a write-only value at a hidden
prompt (never from argv) and replaces it under a fresh operation id.
Installing a release is ``skulk-plugin-service install-plugin`` on the node itself.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Annotated, Any, Final

import typer
from rich.table import Table

from skulk_cli import console
from skulk_cli.client import SkulkClient
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client

app = typer.Typer(
    help="The node's installed plugins: list, show, enable and disable managed ones.",
    no_args_is_help=True,
)

SETTLED: Final = frozenset({"complete", "failed", "recovery_required", "superseded"})
WAIT_SECONDS: Final = 60.0

PluginArg = Annotated[
    str,
    typer.Argument(
        metavar="PLUGIN_ID", help="A managed installation's id (managed.NAME).", show_default=False
    ),
]


@app.command("list")
def list_plugins(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Installed plugins with their nodes; a plugin whose manager is down shows as
    unavailable."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        answer = client.plugins()
    if cli.wants_json(json_output):
        console.emit_json(answer)
        return
    listed = answer.get("plugins")
    plugins = [p for p in listed if isinstance(p, dict)] if isinstance(listed, list) else []
    if not plugins:
        console.show("No plugins are installed (skulk-plugin-service install-plugin adds one).")
        return
    table = Table(title="Plugins")
    for column in ("plugin", "available", "node", "version", "status"):
        table.add_column(column)
    for plugin in plugins:
        nodes = plugin.get("nodes") or [{}]
        for node in nodes:
            table.add_row(
                str(plugin.get("pluginId")),
                "yes" if plugin.get("available") else "no",
                str(node.get("nodeId") or "-"),
                str(node.get("version") or "-"),
                str(node.get("status") or "no release"),
            )
    console.show(table)


@app.command()
def show(ctx: typer.Context, plugin_id: PluginArg, json_output: JsonFlag = False) -> None:
    """One managed installation: its selection, process and latest operation."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        answer = client.managed_plugin(plugin_id)
    if cli.wants_json(json_output):
        console.emit_json(answer)
        return
    release = _object(answer.get("release"))
    service = _object(answer.get("service"))
    table = Table(title=plugin_id, show_header=False)
    table.add_column("fact", no_wrap=True)
    table.add_column("value", overflow="fold")
    rows = [
        (
            "release",
            f"{release.get('bundle_id')} {release.get('bundle_version')}" if release else None,
        ),
        ("publisher", release.get("publisher")),
        ("selected digest", answer.get("selected_digest")),
        ("selection revision", answer.get("selection_revision")),
        ("enabled", answer.get("enabled")),
        ("uninstalled", answer.get("uninstalled")),
        ("process", service.get("status")),
        ("operation", f"{answer.get('operation_id')} ({answer.get('operation_state')})"),
    ]
    for name, value in rows:
        table.add_row(name, "-" if value is None else str(value))
    console.show(table)


def _change(cli: CliContext, plugin_id: str, action: str, json_output: bool) -> None:
    with node_client(cli) as client:
        observed = client.managed_plugin(plugin_id)
        body: dict[str, object] = {
            "operation_id": secrets.token_hex(16),
            "action": action,
            "expected_revision": observed.get("selection_revision"),
        }
        if action == "activate":
            digest = observed.get("selected_digest")
            if digest is None:
                console.error(
                    f"{plugin_id} has no selected release to enable.",
                    hint="Install one on the node with `skulk-plugin-service install-plugin`.",
                )
                raise typer.Exit(EXIT_REFUSED)
            body["runtime_digest"] = digest
        client.submit_plugin_operation(plugin_id, body)
        operation = _settle(client, plugin_id, str(body["operation_id"]))
    if cli.wants_json(json_output):
        console.emit_json(operation)
    elif operation.get("state") == "complete":
        console.show(f"{plugin_id}: {'enabled' if action == 'activate' else 'disabled'}.")
    if operation.get("state") != "complete":
        console.error(
            f"{plugin_id}: operation {body['operation_id']} is {operation.get('state')} "
            f"({operation.get('error_code') or 'no code'})."
        )
        raise typer.Exit(EXIT_REFUSED)


def _settle(client: SkulkClient, plugin_id: str, operation_id: str) -> dict[str, Any]:
    """Read the submitted operation until it settles (bounded; never resubmitted)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        operation: dict[str, Any] = client.plugin_operation(plugin_id, operation_id)
        if operation.get("state") in SETTLED or time.monotonic() > deadline:
            return operation
        time.sleep(0.2)


@app.command()
def enable(ctx: typer.Context, plugin_id: PluginArg, json_output: JsonFlag = False) -> None:
    """Start the installation's selected release (an `activate` operation)."""
    _change(CliContext.of(ctx), plugin_id, "activate", json_output)


@app.command()
def disable(ctx: typer.Context, plugin_id: PluginArg, json_output: JsonFlag = False) -> None:
    """Stop the installation's owner; its records and cleanup material are kept."""
    _change(CliContext.of(ctx), plugin_id, "disable", json_output)


NodeArg = Annotated[
    str, typer.Argument(metavar="NODE_ID", help="The installed node's id.", show_default=False)
]
AnyPluginArg = Annotated[
    str,
    typer.Argument(
        metavar="PLUGIN_ID",
        help="The plugin's id (as `skulk plugins list` shows it).",
        show_default=False,
    ),
]


def _parse_setting(raw: str) -> tuple[str, object]:
    key, sep, value = raw.partition("=")
    if not sep or not key:
        raise typer.BadParameter(f"'{raw}' is not key=value", param_hint="'--set'")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value  # plain text


def _show_configuration(plugin_id: str, node_id: str, configuration: dict[str, Any]) -> None:
    table = Table(title=f"{plugin_id} / {node_id}", show_header=False)
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_row("enabled", str(configuration.get("enabled")))
    table.add_row("revision", str(configuration.get("revision")))
    values: dict[str, Any] = configuration.get("values") or {}
    for key in sorted(values):
        table.add_row(key, json.dumps(values[key]))
    console.show(table)


@app.command()
def configure(  # noqa: PLR0917 (typer options are parameters)
    ctx: typer.Context,
    plugin_id: AnyPluginArg,
    node_id: NodeArg,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Edit one ordinary setting (repeatable; VALUE is JSON, or plain text).",
        ),
    ] = None,
    credential: Annotated[
        str | None,
        typer.Option(
            "--credential",
            metavar="CREDENTIAL_ID",
            help="Replace this write-only credential; its value is read at a hidden prompt.",
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Show or edit one installed node's settings; replace a credential."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        current: dict[str, Any] = client.plugin_node(plugin_id, node_id, "configuration")
        answer = current
        if settings:
            values = dict(current.get("values") or {})
            values.update(_parse_setting(raw) for raw in settings)
            body = {
                "operation": "edit",
                "values": values,
                "expectedRevision": current.get("revision"),
                "expectedSchemaDigest": current.get("schemaDigest"),
            }
            edited: dict[str, Any] = client.plugin_node(plugin_id, node_id, "configuration", body)
            answer = edited["configuration"]
        if credential is not None:
            answer = _replace_credential(client, plugin_id, node_id, credential)
    if cli.wants_json(json_output):
        console.emit_json(answer)
    elif credential is not None:
        console.show(f"{plugin_id} / {node_id}: credential {credential} replaced.")
    else:
        _show_configuration(plugin_id, node_id, answer)


def _replace_credential(
    client: SkulkClient, plugin_id: str, node_id: str, credential_id: str
) -> dict[str, Any]:
    metadata: dict[str, Any] = client.plugin_node(plugin_id, node_id, "credentials")
    value = typer.prompt(f"{credential_id} (input hidden)", hide_input=True)
    body = {
        "operation": "replace",
        "operationId": secrets.token_hex(16),
        "credentialId": credential_id,
        "expectedRevision": metadata.get("revision"),
        "expectedSchemaDigest": metadata.get("schemaDigest"),
        "value": value,
    }
    del value
    replaced: dict[str, Any] = client.plugin_node(plugin_id, node_id, "credentials", body)
    return replaced


def _object(value: object) -> dict[str, Any]:
    """A JSON object the node nested in its answer (empty when it sent none)."""
    return value if isinstance(value, dict) else {}
