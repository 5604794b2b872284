"""`skulk run`: one step from a model id to a chat, doing whatever is missing first.

Like ``ollama run``: a model the catalog lacks is added from Hugging Face, bytes
the node lacks are downloaded, a model no instance serves is placed (the
planner's first valid preview, as ``skulk place`` chooses), each step shown as it
happens; then ``skulk chat`` takes over, one-shot with PROMPT or its REPL without.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Final

import typer
from rich.text import Text

from skulk_cli import console, render, views
from skulk_cli.client import SkulkApiError, SkulkClient
from skulk_cli.commands import chat as chat_command
from skulk_cli.commands.chat import SystemOption, TemperatureOption
from skulk_cli.commands.placement import (
    READY_STATUSES,
    Shape,
    choose_preview,
    follow_placement,
)
from skulk_cli.context import EXIT_REFUSED, CliContext, node_client
from skulk_core.state.shards import InstanceMeta, Sharding

# An id Hugging Face could hold: owner/name. ``local/...`` ids are this node's own.
_HUB_ID: Final = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_LOCAL_PREFIX: Final = "local/"
_TEXT: Final = "text"
"""The capability ``/v1/models`` lists for a model that generates text."""


def run(
    ctx: typer.Context,
    model: Annotated[
        str,
        typer.Argument(
            metavar="MODEL",
            help="A catalog id (`skulk models list`) or a Hugging Face repository (owner/name).",
            show_default=False,
        ),
    ],
    prompt: Annotated[
        str | None,
        typer.Argument(
            metavar="PROMPT",
            help="Ask this once and exit; leave it out for an interactive session.",
            show_default=False,
        ),
    ] = None,
    *,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            metavar="N",
            min=1,
            help="Stop each reply after N tokens (default: as `skulk chat`).",
            show_default=False,
        ),
    ] = None,
    temperature: TemperatureOption = None,
    system: SystemOption = None,
) -> None:
    """Chat with a model in one step: add, download and place it first if needed.

    A Hugging Face repository the catalog lacks is added (pinned to its current
    commit), a model whose bytes the node lacks is downloaded with a progress bar,
    and a model no instance serves is placed where the planner ranks first, waiting
    until it is ready. Then it chats exactly like `skulk chat`: with PROMPT it
    answers once and exits, without it starts a session (`/exit` or Ctrl-D ends it).
    A model that is already placed goes straight to the chat. Any step that fails
    exits 1 with the reason and what to do about it.
    """
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        _known(client, model)
        _generates_text(client, model)
        _downloaded(client, model)
        _placed(client, model)
    options: dict[str, object] = {}
    # Only what was given: the chat command's own defaults (a reply cap) stay.
    if max_tokens is not None:
        options["max_tokens"] = max_tokens
    if temperature is not None:
        options["temperature"] = temperature
    if system is not None:
        options["system"] = system
    ctx.invoke(chat_command.chat, ctx, model, prompt, **options)


def _step(text: str) -> None:
    console.note(Text.assemble(("→ ", "bold cyan"), text))


def _done(text: str) -> None:
    console.note(Text.assemble(("✓ ", "bold green"), text))


def _fail(message: str, hint: str | None = None) -> typer.Exit:
    console.error(message, hint=hint)
    return typer.Exit(EXIT_REFUSED)


def _catalog(client: SkulkClient) -> dict[str, views.Model]:
    listing = views.parse(client.models(), views.ModelList, "/v1/models")
    return {row.id: row for row in listing.data}


def _known(client: SkulkClient, model: str) -> None:
    """Add ``model`` from Hugging Face when the catalog lacks it."""
    catalog = _catalog(client)
    if model in catalog:
        return
    if model.startswith(_LOCAL_PREFIX) or not _HUB_ID.match(model):
        close = _suggestions(model, list(catalog))
        hint = f"Did you mean `skulk run {close[0]}`? " if close else ""
        raise _fail(
            f"Unknown model {model!r}: it is not in the catalog and is not a Hugging Face "
            "repository id (owner/name).",
            hint=hint + "`skulk models list` shows the catalog; `skulk models search TEXT` "
            "finds repositories on Hugging Face.",
        )
    _step(f"Adding {model} from Hugging Face…")
    try:
        added = client.add_model({"model_id": model})
    except SkulkApiError as exc:
        name = model.rsplit("/", maxsplit=1)[-1]
        raise _fail(
            f"Could not add {model}: {exc.message}",
            hint=f"`skulk models search {name}` lists matching repositories.",
        ) from None
    _done(
        f"Added {added.get('id', model)} at {added.get('source_revision') or 'its latest commit'}"
    )


def _generates_text(client: SkulkClient, model: str) -> None:
    """Refuse before any download or placement a model there is no chatting with."""
    row = _catalog(client).get(model)
    if row is None or not row.capabilities or _TEXT in row.capabilities:
        return
    raise _fail(
        f"{model} does not generate text (it does: {', '.join(row.capabilities)}); "
        "`skulk run` chats with text models.",
        hint="`skulk models list` shows each model's capabilities.",
    )


def _suggestions(model: str, ids: list[str]) -> list[str]:
    """Catalog ids ``model`` may have meant: near spellings, else ids containing it."""
    close = difflib.get_close_matches(model, ids, n=3)
    if close:
        return close
    needle = model.lower()
    return sorted(i for i in ids if needle in i.lower())[:3]


def _downloaded(client: SkulkClient, model: str) -> None:
    """Download ``model``'s bytes to this node when no node reports them installed."""
    row = _catalog(client).get(model)
    if row is None or row.installed:
        return
    # The download's progress bars (and the models group) load only for a download.
    from skulk_cli.commands.models import follow_download  # noqa: PLC0415

    node_id = str(client.node_identity().get("nodeId", ""))
    _step(f"Downloading {model}…")
    try:
        started = client.start_download(node_id, model)
        final = follow_download(client, node_id, model, started, quiet=False)
    except KeyboardInterrupt:
        client.cancel_download(node_id, model)
        raise _fail(
            "Download cancelled; the partial file is kept.",
            hint=f"`skulk run {model}` again resumes it.",
        ) from None
    except SkulkApiError as exc:
        raise _fail(f"Could not download {model}: {exc.message}") from None
    status = str(final.get("status"))
    if status != "completed":
        raise _fail(
            f"Downloading {model} {status}: {final.get('error') or 'no reason given'}",
            hint=f"`skulk models download {model}` retries it.",
        )
    _done(f"Downloaded {model}")


def _placed(client: SkulkClient, model: str) -> None:
    """Place ``model`` unless an instance serves it; either way, wait until ready."""
    state = views.parse(client.state(), views.ClusterState, "/state")
    existing = _instance_of(state, model)
    if existing is not None:
        if _ready(state, existing):
            return
        _step(f"{model} is placed; waiting for instance {existing} to be ready…")
        _wait(client, views.PlaceResponse(instance_id=existing, model_id=model), model)
        return
    _step(f"No instance serves {model}; placing it where the planner ranks first…")
    raw = client.instance_previews(model, excluded_nodes=())
    listing = views.parse(raw, views.PreviewList, "/instance/previews")
    chosen = choose_preview(listing, Shape())
    if chosen is None:
        reasons = sorted({p.error for p in listing.previews if p.error})
        why = f": {'; '.join(reasons[:3])}" if reasons else ""
        raise _fail(
            f"No node has room for {model}{why}.",
            hint=f"`skulk previews {model}` shows what fits where; `skulk instances list` "
            "shows what holds memory now.",
        )
    preview = listing.previews[chosen]
    console.note(render.chosen_preview(preview, state, None))
    try:
        placed = client.place_instance(
            model,
            sharding=preview.sharding or Sharding.PIPELINE,
            instance_meta=preview.instance_meta or InstanceMeta.MLX_RING,
            min_nodes=1,
            excluded_nodes=[],
            context_tokens=None,
        )
    except SkulkApiError as exc:
        raise _fail(
            f"Placing {model} was refused: {exc.message}",
            hint=f"`skulk previews {model}` shows what fits where.",
        ) from None
    accepted = views.parse(placed, views.PlaceResponse, "/place_instance")
    _wait(client, accepted, model)


def _wait(client: SkulkClient, accepted: views.PlaceResponse, model: str) -> None:
    outcome = follow_placement(client, accepted)
    if outcome.error is not None:
        raise _fail(outcome.error, hint=outcome.hint)
    _done(f"{model} is ready (instance {accepted.instance_id})")


def _instance_of(state: views.ClusterState, model: str) -> str | None:
    """A placed instance of ``model``: a ready one first."""
    found = [
        instance_id
        for instance_id, tagged in sorted(state.instances.items())
        if (untagged := views.untag(tagged)) is not None
        and untagged[1].shard_assignments.model_id == model
    ]
    ready = [i for i in found if _ready(state, i)]
    chosen = ready or found
    return chosen[0] if chosen else None


def _ready(state: views.ClusterState, instance_id: str) -> bool:
    untagged = views.untag(state.instances.get(instance_id, {}))
    if untagged is None:
        return False
    runners = untagged[1].shard_assignments.node_to_runner.values()
    statuses = [views.untag(state.runners.get(r, {})) for r in runners]
    return bool(statuses) and all(s is not None and s[0] in READY_STATUSES for s in statuses)
