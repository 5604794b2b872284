"""`skulk ask` and `skulk steward ...`: talk to Skulk itself (intelligent fabric).

``ask`` sends one question to the reserved ``skulk/steward`` model and streams the
investigation's tool steps dimmed, then the answer. ``steward status`` shows
``GET /v1/steward``; ``steward proposals`` the proposal audit; ``approve`` and
``reject`` decide one pending proposal (each decision is single use).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from skulk_cli import console, wire_formats
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client
from skulk_cli.wire_formats import Finish, StreamError, TextDelta, WireFormat

STEWARD_MODEL = "skulk/steward"

app = typer.Typer(
    help="Skulk's own cognition (intelligent fabric): status and action proposals.",
    no_args_is_help=True,
)


def ask(
    ctx: typer.Context,
    question: Annotated[
        str, typer.Argument(metavar="QUESTION", help="What to ask Skulk.", show_default=False)
    ],
    json_output: JsonFlag = False,
) -> None:
    """Ask Skulk about its cluster: the tool steps stream dimmed, then the answer.

    Needs intelligent-fabric mode (`intelligent_fabric.enabled`); while the steward is
    still loading the node answers 503 and this exits 1 with its state.
    """
    cli = CliContext.of(ctx)
    messages: list[dict[str, object]] = [{"role": "user", "content": question}]
    with node_client(cli) as client:
        if cli.wants_json(json_output):
            body = {"model": STEWARD_MODEL, "messages": messages, "stream": False}
            console.emit_json(client.generate("/v1/chat/completions", body))
            return
        body = {"model": STEWARD_MODEL, "messages": messages, "stream": True}
        out = console.TextStream()
        error: str | None = None
        with client.stream("/v1/chat/completions", body, wire_formats.SSE) as stream:
            for event in wire_formats.events(WireFormat.OPENAI, stream):
                match event:
                    case TextDelta(thinking=True):
                        out.write(event.text, style="dim")
                    case TextDelta():
                        out.write(event.text)
                    case StreamError(message=message):
                        error = message
                    case Finish():
                        pass
        out.end_line()
    if error is not None:
        console.error(error)
        raise typer.Exit(EXIT_REFUSED)


@app.command("status")
def status(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Whether Skulk's steward is enabled, placed and ready, and on which brain."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        answer = client.steward_status()
    if cli.wants_json(json_output):
        console.emit_json(answer)
        return
    table = Table(title="Skulk (steward)", show_header=False)
    table.add_column("fact")
    table.add_column("value")
    for key in ("state", "enabled", "present", "ready", "steward_model", "desired_model"):
        table.add_row(key.replace("_", " "), str(answer.get(key)))
    table.add_row("transition", str(answer.get("transition")))
    progress = answer.get("progress")
    if isinstance(progress, int | float):
        table.add_row("progress", f"{progress:.0%}")
    console.show(table)


@app.command("proposals")
def proposals(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """The steward's action proposals, newest first, with their status."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        answer = client.steward_proposals()
    if cli.wants_json(json_output):
        console.emit_json(answer)
        return
    items = answer.get("proposals")
    rows = items if isinstance(items, list) else []
    if not rows:
        console.note(Text("No proposals."))
        return
    table = Table(title="Proposals")
    for column in ("id", "action", "target", "status", "expires", "outcome"):
        table.add_column(column)
    for item in rows:
        if isinstance(item, dict):
            table.add_row(
                str(item.get("proposal_id")),
                str(item.get("action")),
                str(item.get("target")),
                str(item.get("status")),
                str(item.get("expires_at")),
                str(item.get("outcome") or ""),
            )
    console.show(table)


def _decide(ctx: typer.Context, proposal_id: str, approved: bool, json_output: bool) -> None:
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        answer = client.decide_proposal(proposal_id, approved)
    if cli.wants_json(json_output):
        console.emit_json(answer)
        return
    console.note(Text(str(answer.get("message", "decided"))))


ProposalId = Annotated[
    str, typer.Argument(metavar="ID", help="The proposal's id.", show_default=False)
]


@app.command("approve")
def approve(ctx: typer.Context, proposal_id: ProposalId, json_output: JsonFlag = False) -> None:
    """Approve one pending proposal: the master revalidates and dispatches it."""
    _decide(ctx, proposal_id, True, json_output)


@app.command("reject")
def reject(ctx: typer.Context, proposal_id: ProposalId, json_output: JsonFlag = False) -> None:
    """Reject one pending proposal; nothing changes."""
    _decide(ctx, proposal_id, False, json_output)
