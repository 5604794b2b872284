"""Steward proposals on this node: creation from a proposal tool, the audit, decisions.

The proposal tools (operator-authority turns only) resolve their target here, before
anything is recorded: stop/restart need exactly one ordinary (non-system) instance of
the model, place a model in the catalog, cancel a download a transfer in flight on a
uniquely named node. The record goes to the master as ``CreateProposal``; the decision
route sends ``ChangeProposal`` (single use: the master refuses a second one). The master's
:class:`~skulk_daemon.steward.dispatch.ProposalDispatcher` acts on approvals.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Final

import msgspec

from skulk_core.ids import CommandId, ModelId, new_command_id
from skulk_core.state.commands import ChangeProposal, CreateProposal
from skulk_core.state.proposal_rules import PROPOSAL_NOT_FOUND, find
from skulk_core.state.proposals import (
    HARNESS_LIFETIME,
    MAX_EVIDENCE_CHARS,
    MAX_TEXT_CHARS,
    ProposalAction,
    ProposalStatus,
    ProposalView,
    StewardProposal,
    view_of,
)
from skulk_core.steward import evidence
from skulk_core.steward.lifecycle import ACTIVE_DOWNLOAD_STATUSES, is_steward
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import CommandRefused, Node

_EFFECTS: Final = {
    ProposalAction.PLACE_MODEL: "the model is placed by the normal placement planner "
    "(missing shards are staged first)",
    ProposalAction.STOP_MODEL: "the selected instance is deleted; requests for the model "
    "stop being served by it",
    ProposalAction.RESTART_MODEL: "the selected instance is torn down, then placed again "
    "once its capacity is released (within five minutes)",
    ProposalAction.CANCEL_DOWNLOAD: "the selected transfer on the named node is cancelled",
}


class ProposalList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/steward/proposals``: newest first."""

    proposals: tuple[ProposalView, ...]


class DecisionRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    approved: bool


class DecisionAccepted(msgspec.Struct, frozen=True, kw_only=True):
    proposal_id: str
    command_id: str
    message: str


class ProposalBook:
    def __init__(self, node: Node) -> None:
        self._node = node

    def list(self) -> ProposalList:
        records = reversed(self._node.state.steward_proposals)
        return ProposalList(proposals=tuple(view_of(p) for p in records))

    async def propose(self, tool: str, arguments: dict[str, str], trace: str) -> str:
        """Record one proposal for a proposal tool's call; the tool's result text."""
        try:
            action = ProposalAction(tool)
        except ValueError:
            return f"unknown proposal tool {tool!r}"
        state = self._node.state
        model = ModelId(arguments.get("model_id", ""))
        names = evidence.node_names(state, self._node.view().telemetry)
        now = datetime.now(UTC)
        proposal = StewardProposal(
            proposal_id=f"prop_{secrets.token_hex(8)}",
            created_at=now,
            expires_at=now + HARNESS_LIFETIME,
            action=action,
            target_label=f"model {model}",
            rationale=arguments.get("rationale", "")[:MAX_TEXT_CHARS],
            evidence=trace[-MAX_EVIDENCE_CHARS:],
            expected_effect=_EFFECTS[action],
            model_id=model,
        )
        match action:
            case ProposalAction.STOP_MODEL | ProposalAction.RESTART_MODEL:
                ordinary = [
                    iid
                    for iid, inst in state.instances.items()
                    if inst.shard_assignments.model_id == model and not is_steward(state, iid)
                ]
                if len(ordinary) != 1:
                    return (
                        f"no proposal: model {model} has {len(ordinary)} ordinary instances "
                        "(exactly one is needed; system instances are never eligible)"
                    )
                hosts = ", ".join(
                    names.get(n, "unknown")
                    for n in state.instances[ordinary[0]].shard_assignments.node_to_runner
                )
                proposal = msgspec.structs.replace(
                    proposal, instance_id=ordinary[0], target_label=f"model {model} on {hosts}"
                )
            case ProposalAction.PLACE_MODEL:
                if self._node.catalog().get(model) is None:
                    return f"no proposal: {model} is not in the catalog"
            case ProposalAction.CANCEL_DOWNLOAD:
                target = evidence.resolve_node(arguments.get("node_name", ""), names)
                if isinstance(target, evidence.Unresolved):
                    return f"no proposal: {target.reason}"
                moving = [
                    d
                    for d in state.downloads.get(target, ())
                    if d.model_id == model and d.status in ACTIVE_DOWNLOAD_STATUSES
                ]
                if not moving:
                    return f"no proposal: no transfer of {model} is in flight on that node"
                if moving[0].attempt_id is None:
                    return (
                        f"no proposal: the transfer of {model} on that node reports no attempt "
                        "identity, so it cannot be cancelled exactly"
                    )
                proposal = msgspec.structs.replace(
                    proposal,
                    node_id=target,
                    attempt_id=moving[0].attempt_id,
                    target_label=f"download of {model} on {names[target]}",
                )
        try:
            await self._node.submit(
                CreateProposal(command_id=new_command_id(), proposal=proposal, observed_at=now)
            )
        except CommandRefused as exc:
            return f"no proposal: {exc.message}"
        return (
            f"proposal {proposal.proposal_id} created ({action.value}: {proposal.target_label}); "
            "it is inert until an operator approves it, and expires in ten minutes"
        )

    async def decide(self, proposal_id: str, approved: bool, actor: str) -> DecisionAccepted:
        current = find(self._node.state, proposal_id)
        if current is None:
            raise ApiError(404, f"proposal {proposal_id!r} not found", code="proposal_not_found")
        if current.status != ProposalStatus.PENDING:
            raise ApiError(
                409,
                f"proposal {proposal_id} was already decided ({current.status.value})",
                code="proposal_decided",
            )
        command_id: CommandId = new_command_id()
        try:
            await self._node.submit(
                ChangeProposal(
                    command_id=command_id,
                    proposal_id=proposal_id,
                    status=ProposalStatus.APPROVED if approved else ProposalStatus.REJECTED,
                    observed_at=datetime.now(UTC),
                    decided_by=actor,
                )
            )
        except CommandRefused as exc:
            status = 404 if exc.code == PROPOSAL_NOT_FOUND else 409
            raise ApiError(status, exc.message, code="proposal_decided") from None
        verdict = "approval" if approved else "rejection"
        return DecisionAccepted(
            proposal_id=proposal_id,
            command_id=command_id,
            message=f"the {verdict} entered the ordered command path; poll "
            "GET /v1/steward/proposals for the master's result",
        )
