"""`skulk store download|cancel|storage|reconciliation`: the store's jobs.

``download`` asks the store host to fetch a model (its canonical copy) and follows
it with a progress bar until it ends (``--no-wait`` returns at once); ``cancel``
stops one, its partial files kept for a resume; ``storage`` lists what this node
(or ``--node``'s) keeps on disk; ``reconciliation`` shows what the store host's
last reconciliation pass scanned, imported and refused (``--rescan`` runs one now,
from the store host's own machine).
"""

from __future__ import annotations

import time
from typing import Annotated, Final

import typer
from rich.console import Console, Group
from rich.text import Text

from skulk_cli import console
from skulk_cli.client import JsonObject, SkulkApiError, SkulkClient
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client
from skulk_cli.render_store import reconciliation_view, size, storage_table
from skulk_cli.views import parse
from skulk_core.store.answers import (
    CancelledDownload,
    NodeStorage,
    ReconciliationStatus,
    StoreDownload,
)

POLL_SECONDS: Final = 0.5
# The store's download states that end the wait; ``error`` is a store-host refusal.
COMPLETE: Final = "complete"
ENDED: Final = frozenset({COMPLETE, "failed", "cancelled", "error"})

ModelArg = Annotated[str, typer.Argument(help="Model id (a Hugging Face owner/name).")]


def download(
    ctx: typer.Context,
    model_id: ModelArg,
    *,
    gguf_file: Annotated[
        str | None,
        typer.Option("--gguf-file", help="The GGUF quant to fetch (default: the card's)."),
    ] = None,
    revision: Annotated[
        str | None,
        typer.Option("--revision", help="Pin this 40-hex commit (default: the card's)."),
    ] = None,
    registry_card_id: Annotated[
        str | None,
        typer.Option(
            "--registry-card-id",
            help="Fetch (or adopt) this signed registry card's artifact: an update.",
        ),
    ] = None,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="Return once the store accepts; do not follow it.")
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Have the store host fetch a model, and follow its progress until it is stored.

    A model the store already holds answers complete at once. Exits 1 when the store
    refuses, or the download fails or is cancelled (with the reason).
    """
    cli = CliContext.of(ctx)
    body: JsonObject = {}
    for key, value in (
        ("gguf_file", gguf_file),
        ("source_revision", revision),
        ("registry_card_id", registry_card_id),
    ):
        if value is not None:
            body[key] = value
    with node_client(cli) as client:
        raw = client.start_store_download(model_id, body)
        current = parse(raw, StoreDownload, "store download")
        if not no_wait and current.status not in ENDED:
            raw = _follow(client, model_id, current, quiet=cli.wants_json(json_output))
            current = parse(raw, StoreDownload, "store download")
    if cli.wants_json(json_output):
        console.emit_json(raw)
    if current.status in ENDED and current.status != COMPLETE:
        why = current.error or "no reason given"
        console.error(
            f"The store's download of {model_id} {current.status}: {why}",
            hint=f"`skulk store download {model_id}` tries again (partial files resume).",
        )
        raise typer.Exit(EXIT_REFUSED)
    if cli.wants_json(json_output):
        return
    if current.status == COMPLETE:
        console.show(
            Text(f"Stored {model_id} ({size(current.total_bytes)}); every node can stage it.")
        )
    else:
        console.show(
            Text(
                f"The store is downloading {model_id} ({current.status}); follow it with "
                "`skulk store downloads --watch`."
            )
        )


def _follow(client: SkulkClient, model_id: str, first: StoreDownload, *, quiet: bool) -> JsonObject:
    """Poll the download's status with a bar (on stderr) until it ends."""
    from rich.progress import (  # noqa: PLC0415 - only a followed download draws bars
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TransferSpeedColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        # NOTE: the bar is drawn on stderr, so stdout stays the answer (--json).
        console=Console(stderr=True),
        disable=quiet,
    )
    current = first
    raw: JsonObject = {}
    with bar:
        task = bar.add_task(model_id, total=current.total_bytes or None)
        while current.status not in ENDED:
            time.sleep(POLL_SECONDS)
            raw = client.store_download_status(model_id)
            current = parse(raw, StoreDownload, "store download status")
            bar.update(task, completed=current.downloaded_bytes, total=current.total_bytes or None)
    return raw


def cancel(ctx: typer.Context, model_id: ModelArg, json_output: JsonFlag = False) -> None:
    """Cancel the store's download of a model; its partial files stay for a resume.

    Exits 1 when no download of it is pending or active.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        try:
            raw = client.cancel_store_download(model_id)
        except SkulkApiError as exc:
            if exc.status != 409:
                raise
            console.error(
                f"No store download of {model_id} to cancel.",
                hint="`skulk store downloads` lists the store's downloads.",
            )
            raise typer.Exit(EXIT_REFUSED) from None
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    stopped = parse(raw, CancelledDownload, "store download cancel")
    console.show(
        Text(
            f"Cancelled the store's download of {model_id} at "
            f"{size(stopped.downloaded_bytes)} of {size(stopped.total_bytes)}; "
            f"`skulk store download {model_id}` resumes it."
        )
    )


def storage(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """What this node keeps on disk: each model copy, its size, where it lives, whether
    it is verified and whether a running instance uses it; the models volume's free
    space."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.storage()
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    answer = parse(raw, NodeStorage, "storage")
    console.show(
        Group(
            storage_table(answer),
            Text(
                f"{answer.models_dir}: {size(answer.free_bytes)} free of "
                f"{size(answer.total_bytes)}",
                style="dim",
            ),
        )
    )


def reconciliation(
    ctx: typer.Context,
    rescan: Annotated[
        bool,
        typer.Option("--rescan", help="Run a pass now (only from the store host's machine)."),
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """What the store's reconciliation found: nodes scanned, copies discovered and
    imported, what is pending, tombstoned or refused (and why)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.rescan_reconciliation() if rescan else client.reconciliation()
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    console.show(reconciliation_view(parse(raw, ReconciliationStatus, "reconciliation")))
