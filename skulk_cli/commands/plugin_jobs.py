"""`skulk plugins proposals|setup|grants ...`: an installed node's proposals, its setup
operations, and paired devices' plugin grants.

``proposals list`` pages a node's retained proposals; ``proposals show`` reviews one
exactly (its digest) and prints the review fence an approval must name;
``proposals approve`` approves and executes exactly that review (``--review-revision``
is required: nothing is approved that was not reviewed) under a fresh operation id,
then observes it until it settles; ``proposals status`` observes one (never replays).
``setup actions`` lists a node's setup actions and retained operations; ``setup run``
starts one under the fences it has just read (a node changed meanwhile is refused with
409, never overwritten) and follows it; ``setup status`` reads one (``--resume``
explicitly resumes its original intent). ``grants list`` and ``grants set`` read and
replace a paired device's plugin scopes (direct owner only).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Final

import msgspec
import typer
from rich.console import RenderableType
from rich.text import Text

from skulk_cli import console, render_ops
from skulk_cli.client import JsonObject
from skulk_cli.context import EXIT_REFUSED, CliContext, JsonFlag, node_client
from skulk_cli.ops_views import PluginGrantsView, PluginGrantView
from skulk_cli.views import parse
from skulk_core.extensions.proposals import ProposalOperation, ProposalPage, ProposalReview
from skulk_core.extensions.setup_actions import NodeSetupActions, SetupOperation

proposals_app = typer.Typer(
    help="An installed node's proposals: list, review, approve, observe.", no_args_is_help=True
)
setup_app = typer.Typer(
    help="An installed node's setup actions: list, run, observe, resume.", no_args_is_help=True
)
grants_app = typer.Typer(
    help="Paired devices' plugin scopes (direct owner only).", no_args_is_help=True
)

POLL_SECONDS: Final = 0.5
WAIT_SECONDS: Final = 120.0
SETUP_SETTLED: Final = frozenset({"complete", "failed"})
# A proposal action's phases that no longer move on their own (``acknowledged`` means
# the provider durably accepted the work; it is observed later, never waited for).
PROPOSAL_SETTLED: Final = frozenset(
    {"acknowledged", "succeeded", "refused", "approval_interrupted", "uncertain"}
)
_FAILED: Final = frozenset({"failed", "refused", "approval_interrupted", "uncertain"})

PluginArg = Annotated[
    str, typer.Argument(metavar="PLUGIN_ID", help="The plugin's id.", show_default=False)
]
NodeArg = Annotated[
    str,
    typer.Argument(metavar="NODE_ID", help="The plugin's installed node.", show_default=False),
]
ProposalArg = Annotated[
    str, typer.Argument(metavar="PROPOSAL_ID", help="The proposal's id.", show_default=False)
]
DigestOpt = Annotated[
    str,
    typer.Option(
        "--digest", help="The proposal's digest (`proposals list` shows it).", show_default=False
    ),
]
OperationArg = Annotated[
    str,
    typer.Argument(metavar="OPERATION_ID", help="The operation's id.", show_default=False),
]
NoWaitOpt = Annotated[
    bool, typer.Option("--no-wait", help="Return once accepted; do not follow it.")
]


def _operation_id() -> str:
    """A fresh durable operation id: 32 lowercase hexadecimal characters."""
    return uuid.uuid4().hex


# -- proposals ---------------------------------------------------------------------------


@proposals_app.command("list")
def list_proposals(
    ctx: typer.Context,
    plugin_id: PluginArg,
    node_id: NodeArg,
    offset: Annotated[
        int, typer.Option("--offset", min=0, max=127, help="Start at this entry.")
    ] = 0,
    json_output: JsonFlag = False,
) -> None:
    """A page of the node's retained proposals (at most sixteen): id, digest, state,
    expiry and summary."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.plugin_proposals(plugin_id, node_id, offset)
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    console.show(render_ops.proposals(parse(raw, ProposalPage, "proposals")))


@proposals_app.command("show")
def show_proposal(
    ctx: typer.Context,
    plugin_id: PluginArg,
    node_id: NodeArg,
    proposal_id: ProposalArg,
    *,
    digest: DigestOpt,
    json_output: JsonFlag = False,
) -> None:
    """Review one exact proposal: the provider's facts (prices, limits, cleanup terms)
    and the review revision an approval must name. Reading it changes nothing."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.plugin_proposal(plugin_id, node_id, proposal_id, digest)
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    review = parse(raw, ProposalReview, "proposal review")
    console.show(render_ops.proposal_review(review))
    if review.approval_revision is not None:
        console.note(
            Text(
                f"Approve exactly this review with: skulk plugins proposals approve {plugin_id} "
                f"{node_id} {proposal_id} --digest {digest} "
                f"--review-revision {review.approval_revision}",
                style="dim",
            )
        )


@proposals_app.command("approve")
def approve_proposal(
    ctx: typer.Context,
    plugin_id: PluginArg,
    node_id: NodeArg,
    proposal_id: ProposalArg,
    *,
    digest: DigestOpt,
    review_revision: Annotated[
        str,
        typer.Option(
            "--review-revision",
            help="The review fence `proposals show` printed: only that review is approved.",
            show_default=False,
        ),
    ],
    no_wait: NoWaitOpt = False,
    json_output: JsonFlag = False,
) -> None:
    """Approve and execute one exactly reviewed proposal (plugins:approve), then observe
    the action until it settles. Terms changed since the review are refused (exit 1).

    An interrupted or uncertain action is never resubmitted: observe it with
    `proposals status` (the operation id is printed first).
    """
    cli = CliContext.of(ctx)
    operation_id = _operation_id()
    body: JsonObject = {
        "operationId": operation_id,
        "reference": {
            "pluginId": plugin_id,
            "nodeId": node_id,
            "proposalId": proposal_id,
            "proposalDigest": digest,
        },
        "reviewRevision": review_revision,
    }
    console.note(Text(f"operation {operation_id}", style="dim"))
    with node_client(cli) as client:
        raw = client.approve_plugin_proposal(plugin_id, node_id, proposal_id, body)
        if not no_wait:
            raw = _follow(
                f"Approving {proposal_id}",
                lambda: client.plugin_proposal_operation(plugin_id, node_id, operation_id),
                raw,
                PROPOSAL_SETTLED,
            )
    operation = parse(raw, ProposalOperation, "proposal action")
    _finish(cli, json_output, raw, render_ops.proposal_operation(operation), operation.phase)


@proposals_app.command("status")
def proposal_status(
    ctx: typer.Context,
    plugin_id: PluginArg,
    node_id: NodeArg,
    operation_id: OperationArg,
    json_output: JsonFlag = False,
) -> None:
    """Observe one proposal action: its phase, code and cleanup evidence (never signs,
    executes or replays it)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.plugin_proposal_operation(plugin_id, node_id, operation_id)
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    console.show(render_ops.proposal_operation(parse(raw, ProposalOperation, "proposal action")))


# -- setup operations --------------------------------------------------------------------


@setup_app.command("actions")
def setup_actions(
    ctx: typer.Context, plugin_id: PluginArg, node_id: NodeArg, json_output: JsonFlag = False
) -> None:
    """The node's installed setup actions and its retained setup operations."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.plugin_setup_actions(plugin_id, node_id)
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    console.show(render_ops.setup_actions(parse(raw, NodeSetupActions, "setup actions")))


@setup_app.command("run")
def run_setup(
    ctx: typer.Context,
    plugin_id: PluginArg,
    node_id: NodeArg,
    action_id: Annotated[
        str,
        typer.Argument(metavar="ACTION_ID", help="The action (`setup actions` lists them)."),
    ],
    *,
    values: Annotated[
        str,
        typer.Option("--values", help="The action's parameters, as one JSON object."),
    ] = "{}",
    no_wait: NoWaitOpt = False,
    json_output: JsonFlag = False,
) -> None:
    """Start one setup action under the node's current revisions and schema digests,
    then follow it until it completes or fails (exit 1 on failure)."""
    cli = CliContext.of(ctx)
    try:
        parameters = json.loads(values)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--values is not JSON: {exc}") from None
    if not isinstance(parameters, dict):
        raise typer.BadParameter("--values must be a JSON object")
    with node_client(cli) as client:
        listing = parse(
            client.plugin_setup_actions(plugin_id, node_id), NodeSetupActions, "setup actions"
        )
        action = next((a for a in listing.actions if a.action_id == action_id), None)
        if action is None:
            offered = ", ".join(a.action_id for a in listing.actions) or "none"
            console.error(f"Node {node_id} has no setup action {action_id!r} (offered: {offered}).")
            raise typer.Exit(EXIT_REFUSED)
        operation_id = _operation_id()
        body: JsonObject = {
            "operationId": operation_id,
            "actionId": action_id,
            "values": parameters,
            "expectedRevision": listing.revision,
            "expectedSchemaDigest": listing.schema_digest,
            "expectedCredentialRevision": listing.credential_revision,
            "expectedCredentialSchemaDigest": listing.credential_schema_digest,
            "expectedActionSchemaDigest": action.schema_digest,
            "expectedRequiresApproval": action.requires_approval,
        }
        console.note(Text(f"operation {operation_id}", style="dim"))
        raw = client.start_plugin_setup(plugin_id, node_id, body)
        if not no_wait:
            raw = _follow(
                f"Running {action_id} on {node_id}",
                lambda: client.plugin_setup_operation(plugin_id, node_id, operation_id),
                raw,
                SETUP_SETTLED,
            )
    operation = parse(raw, SetupOperation, "setup operation")
    _finish(cli, json_output, raw, render_ops.setup_operations([operation]), operation.phase)


@setup_app.command("status")
def setup_status(
    ctx: typer.Context,
    plugin_id: PluginArg,
    node_id: NodeArg,
    operation_id: OperationArg,
    *,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Explicitly resume the operation's original intent."),
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """One setup operation's last durable progress (`--resume`: resume it)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.plugin_setup_operation(plugin_id, node_id, operation_id, resume=resume)
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    operation = parse(raw, SetupOperation, "setup operation")
    console.show(render_ops.setup_operations([operation]))


# -- grants ------------------------------------------------------------------------------


@grants_app.command("list")
def list_grants(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Every paired device's plugin scopes and grant revision."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        raw = client.plugin_grants()
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    console.show(render_ops.grants(parse(raw, PluginGrantsView, "plugin grants")))


@grants_app.command("set")
def set_grants(
    ctx: typer.Context,
    device_id: Annotated[
        str, typer.Argument(metavar="DEVICE_ID", help="The paired device (`grants list`).")
    ],
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            help="plugins:read, plugins:manage or plugins:approve; repeat; none revokes all.",
            show_default=False,
        ),
    ] = None,
    revision: Annotated[
        int | None,
        typer.Option(
            "--revision",
            min=0,
            help="The grant revision you read (default: read it now).",
            show_default=False,
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Replace one paired device's plugin scopes (a changed revision is refused, exit 1)."""
    cli = CliContext.of(ctx)
    with node_client(cli) as client:
        if revision is None:
            listing = parse(client.plugin_grants(), PluginGrantsView, "plugin grants")
            found = next((d for d in listing.devices if d.device_id == device_id), None)
            # An unknown device keeps revision 0 and the node names it (404).
            revision = found.revision if found is not None else 0
        body: JsonObject = {"expectedRevision": revision, "scopes": list(scope or [])}
        raw = client.put_plugin_grants(device_id, body)
    if cli.wants_json(json_output):
        console.emit_json(raw)
        return
    granted = parse(raw, PluginGrantView, "plugin grant")
    scopes = ", ".join(granted.scopes) or "no plugin scopes"
    console.show(Text(f"{granted.device_name or granted.device_id} now has {scopes}."))


# -- shared ------------------------------------------------------------------------------


class _Phase(msgspec.Struct, frozen=True, kw_only=True):
    phase: str = ""


def _follow(
    what: str, read: Callable[[], JsonObject], first: JsonObject, settled: frozenset[str]
) -> JsonObject:
    """Re-read an operation (with a spinner) until its phase is one of ``settled``, or
    :data:`WAIT_SECONDS` pass (then the last reading is the answer)."""
    current = first
    phase = parse(current, _Phase, "operation").phase
    deadline = time.monotonic() + WAIT_SECONDS
    with console.progress(Text(f"{what}…")) as line:
        while phase not in settled and time.monotonic() < deadline:
            line.update(Text(f"{what}: {phase}…"))
            time.sleep(POLL_SECONDS)
            current = read()
            phase = parse(current, _Phase, "operation").phase
    return current


def _finish(
    cli: CliContext, json_output: bool, raw: JsonObject, shown: RenderableType, phase: str
) -> None:
    """Print the answer; exit 1 when the operation ended without doing its work."""
    if cli.wants_json(json_output):
        console.emit_json(raw)
    else:
        console.show(shown)
    if phase in _FAILED:
        raise typer.Exit(EXIT_REFUSED)
