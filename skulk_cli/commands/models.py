"""`skulk models ...`: the model catalog, and bringing your own model into it.

``search`` and ``add`` talk to Hugging Face through the node (its token, its
endpoint); ``download`` fetches an added model's bytes to the node with a progress
bar (Ctrl-C cancels and keeps the partial file for a later resume); ``import`` makes
a GGUF file already on the node's machine a model; ``quants`` lists a repository's
GGUF files; ``rm`` (:mod:`models_remove`) removes a model from this node.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Final

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from skulk_cli import console, render, views
from skulk_cli.client import SkulkClient
from skulk_cli.commands import models_remove
from skulk_cli.context import CliContext, JsonFlag, node_client

app = typer.Typer(help="Browse the models the cluster knows about.", no_args_is_help=True)

POLL_SECONDS: Final = 0.5
STALE_SECONDS: Final = 5.0
_DONE: Final = frozenset({"completed", "failed", "cancelled"})

ModelArg = Annotated[str, typer.Argument(help="Model id (a Hugging Face owner/name).")]


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


@app.command("search")
def search(  # noqa: PLR0917 - typer passes options positionally
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="Text, or an exact file name ending .gguf.")] = "",
    limit: Annotated[int, typer.Option(min=1, max=100, help="Results to show.")] = 20,
    offset: Annotated[int, typer.Option(min=0, help="Skip this many results.")] = 0,
    mlx_only: Annotated[bool, typer.Option("--mlx-only", help="Only mlx-community.")] = False,
    task: Annotated[str | None, typer.Option("--task", help="A Hugging Face pipeline tag.")] = None,
    json_output: JsonFlag = False,
) -> None:
    """Search Hugging Face model repositories (through the node)."""
    cli = CliContext.of(ctx)
    params = [("query", query), ("limit", str(limit)), ("offset", str(offset))]
    if mlx_only:
        params.append(("mlx_only", "true"))
    if task:
        params.append(("pipeline_tag", task))
    with node_client(cli) as client:
        results = client.search_models(tuple(params))
    if cli.wants_json(json_output):
        console.emit_json(results)
        return
    if not results:
        console.show(Text("No repositories found.", style="dim"))
        return
    table = Table()
    table.add_column("Repository", overflow="fold")
    for name in ("Task", "Downloads", "Params", "Gated"):
        table.add_column(name, justify="right" if name in ("Downloads", "Params") else "left")
    table.add_column("File", overflow="fold")
    for item in results:
        row = item if isinstance(item, dict) else {}
        params_count = row.get("param_count")
        table.add_row(
            str(row.get("id", "")),
            str(row.get("pipeline_tag") or "-"),
            f"{row['downloads']:,}" if isinstance(row.get("downloads"), int) else "-",
            f"{params_count:,}" if isinstance(params_count, int) else "-",
            "yes" if row.get("gated") else "",
            str(row.get("matched_file") or ""),
        )
    console.show(table)


@app.command("add")
def add(
    ctx: typer.Context,
    model_id: ModelArg,
    gguf_file: Annotated[
        str | None, typer.Option("--gguf-file", help="Pin this repo-relative GGUF quant.")
    ] = None,
    revision: Annotated[
        str | None, typer.Option("--revision", help="A full 40-character commit hash.")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Add a Hugging Face model to the catalog, pinned to one commit (no bytes yet)."""
    cli = CliContext.of(ctx)
    body: dict[str, object] = {"model_id": model_id}
    if gguf_file is not None:
        body["gguf_file"] = gguf_file
    if revision is not None:
        body["source_revision"] = revision
    with node_client(cli) as client:
        added = client.add_model(body)
    if cli.wants_json(json_output):
        console.emit_json(added)
        return
    pinned = added.get("source_revision")
    console.show(
        Text.assemble(
            ("Added ", ""),
            (str(added.get("id", model_id)), "bold"),
            (f" at {pinned}" if pinned else "", "dim"),
        )
    )
    # A demo added back is installed at once; a Hugging Face model has no bytes yet.
    step = "place" if added.get("installed") is True else "models download"
    console.note(Text(f"Next: skulk {step} {model_id}"))


@app.command("import")
def import_model(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A .gguf file on the node's machine.")],
    model_id: Annotated[
        str | None, typer.Option("--model-id", help="Catalog id (default local/<name>).")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Import a GGUF file on this machine: hashed and hard-linked, never copied."""
    cli = CliContext.of(ctx)
    body: dict[str, object] = {"path": str(path.expanduser().absolute())}
    if model_id is not None:
        body["model_id"] = model_id
    with node_client(cli) as client:
        imported = client.import_model(body)
    if cli.wants_json(json_output):
        console.emit_json(imported)
        return
    console.show(
        Text.assemble(
            ("Imported ", ""),
            (str(imported.get("model_id")), "bold"),
            (f"  sha256 {imported.get('sha256')}", "dim"),
        )
    )


app.command("rm")(models_remove.remove)


@app.command("quants")
def quants(ctx: typer.Context, model_id: ModelArg, json_output: JsonFlag = False) -> None:
    """List a Hugging Face GGUF repository's quantizations (files to pin with --gguf-file)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.gguf_quants(model_id)
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    options = raw.get("options")
    rows = [row for row in options if isinstance(row, dict)] if isinstance(options, list) else []
    if not rows:
        console.show(Text(f"{model_id} has no GGUF weight files.", style="dim"))
        return
    table = Table()
    table.add_column("GGUF file (for --gguf-file)", overflow="fold")
    table.add_column("Quant")
    table.add_column("Size", justify="right")
    table.add_column("Shards", justify="right")
    for row in rows:
        size = row.get("total_bytes")
        table.add_row(
            str(row.get("gguf_file", "")),
            str(row.get("label", "")),
            f"{size / 1e9:.2f} GB" if isinstance(size, int) else "-",
            str(row.get("shard_count", "")),
        )
    console.show(table)
    console.note(Text(f"Add one with: skulk models add {model_id} --gguf-file FILE"))


@app.command("download")
def download(
    ctx: typer.Context,
    model_id: ModelArg,
    node: Annotated[
        str | None, typer.Option("--node", help="Another member's node id (default: this one).")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Download an added model's bytes to a node, with progress (Ctrl-C cancels)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        node_id = node or str(client.node_identity().get("nodeId", ""))
        started = client.start_download(node_id, model_id)
        try:
            final = follow_download(
                client, node_id, model_id, started, quiet=cli.wants_json(json_output)
            )
        except KeyboardInterrupt:
            final = client.cancel_download(node_id, model_id)
            console.note(Text("Cancelled; the partial file is kept for a later resume."))
    if cli.wants_json(json_output):
        console.emit_json(final)
    status = str(final.get("status"))
    if status == "failed":
        console.error(f"Downloading {model_id} failed: {final.get('error') or ''}")
        raise typer.Exit(1)
    if status == "cancelled":
        raise typer.Exit(1)
    if not cli.wants_json(json_output):
        console.show(Text(f"Downloaded {model_id}; place it with: skulk place {model_id}"))


def follow_download(
    client: SkulkClient, node_id: str, model_id: str, first: dict[str, object], *, quiet: bool
) -> dict[str, object]:
    """Poll ``/state`` ``downloads`` until the node's download of the model ends."""
    from rich.progress import (  # noqa: PLC0415 - only the download command draws bars
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TransferSpeedColumn,
    )

    current = _as_status(first, node_id, model_id)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        # NOTE: the bar is drawn on stderr, so stdout stays the answer (--json).
        console=Console(stderr=True),
        disable=quiet,
    )
    started = time.monotonic()
    seen_active = False
    with bar:
        task = bar.add_task(model_id, total=_int(current.get("total_bytes")) or None)
        while str(current.get("status")) not in _DONE:
            time.sleep(POLL_SECONDS)
            found = _from_state(client.state(), node_id, model_id)
            if found is None:
                continue
            status = str(found.get("status"))
            seen_active = seen_active or status not in _DONE
            # A failure or cancel in /state may be an earlier attempt's, until this
            # one has shown up there (reports apply a moment after the start).
            stale = time.monotonic() - started < STALE_SECONDS
            if status in ("failed", "cancelled") and not seen_active and stale:
                continue
            current = found
            bar.update(
                task,
                completed=_int(current.get("downloaded_bytes")),
                total=_int(current.get("total_bytes")) or None,
            )
    return current


def _from_state(state: dict[str, object], node_id: str, model_id: str) -> dict[str, object] | None:
    downloads = state.get("downloads")
    reports = downloads.get(node_id) if isinstance(downloads, dict) else None
    for report in reports if isinstance(reports, list) else []:
        if isinstance(report, dict) and report.get("modelId") == model_id:
            return {
                "node_id": node_id,
                "model_id": model_id,
                "status": report.get("status"),
                "downloaded_bytes": report.get("downloadedBytes", 0),
                "total_bytes": report.get("totalBytes", 0),
                "error": report.get("errorMessage"),
            }
    return None


def _as_status(answer: dict[str, object], node_id: str, model_id: str) -> dict[str, object]:
    return {"node_id": node_id, "model_id": model_id, **answer}


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
