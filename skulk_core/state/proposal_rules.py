"""The master's rules for steward proposals, and how their events change State.

:func:`decide_proposal` is :func:`~skulk_core.state.decide.decide`'s half for the two
proposal commands; :func:`apply_proposal` is :func:`~skulk_core.state.apply.apply`'s.
Bounds (:mod:`skulk_core.state.proposals`): lifetimes of at most fifteen minutes, at most
32 pending, a 128-record audit window that prunes the oldest completed records first
and never a pending, approved, or recently dispatched one.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from skulk_core.ids import InstanceId
from skulk_core.state.commands import ChangeProposal, CreateProposal
from skulk_core.state.events import Event, ProposalChanged, ProposalCreated
from skulk_core.state.proposals import (
    MAX_LIFETIME,
    MAX_PENDING,
    MAX_RECORDS,
    RECOVERY_WINDOW,
    TERMINAL,
    ProposalAction,
    ProposalStatus,
    StewardProposal,
)
from skulk_core.state.state import State

PROPOSAL_CONFLICT = "proposal_conflict"
PROPOSAL_NOT_FOUND = "not_found"

_S = ProposalStatus
_ALLOWED: dict[ProposalStatus, frozenset[ProposalStatus]] = {
    _S.PENDING: frozenset({_S.APPROVED, _S.REJECTED, _S.EXPIRED, _S.FAILED}),
    _S.APPROVED: frozenset({_S.DISPATCHED, _S.FAILED}),
    _S.DISPATCHED: frozenset({_S.DISPATCHED, _S.FAILED}),
}


class ProposalRefusal(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    message: str


def find(state: State, proposal_id: str) -> StewardProposal | None:
    return next((p for p in state.steward_proposals if p.proposal_id == proposal_id), None)


def pending_count(state: State) -> int:
    return sum(1 for p in state.steward_proposals if p.status == ProposalStatus.PENDING)


def decide_proposal(
    state: State, command: CreateProposal | ChangeProposal
) -> list[Event] | ProposalRefusal:
    match command:
        case CreateProposal(proposal=proposal, observed_at=now):
            if find(state, proposal.proposal_id) is not None:
                return ProposalRefusal(code=PROPOSAL_CONFLICT, message="proposal already exists")
            if proposal.expires_at <= now:
                return ProposalRefusal(code="proposal_expired", message="proposal already expired")
            if proposal.expires_at - proposal.created_at > MAX_LIFETIME:
                return ProposalRefusal(
                    code="proposal_lifetime",
                    message="a proposal may live at most fifteen minutes",
                )
            if pending_count(state) >= MAX_PENDING:
                return ProposalRefusal(
                    code="too_many_proposals",
                    message=f"{MAX_PENDING} proposals are already pending; decide some first",
                )
            return [ProposalCreated(proposal=proposal)]
        case ChangeProposal(proposal_id=proposal_id, status=status, observed_at=now):
            current = find(state, proposal_id)
            if current is None:
                return ProposalRefusal(
                    code=PROPOSAL_NOT_FOUND, message=f"proposal {proposal_id} not found"
                )
            if status not in _ALLOWED.get(current.status, frozenset()):
                return ProposalRefusal(
                    code=PROPOSAL_CONFLICT,
                    message=f"proposal {proposal_id} is {current.status.value}, not "
                    f"{'pending' if status in (_S.APPROVED, _S.REJECTED) else 'open'}",
                )
            expired = now >= current.expires_at
            if status in (_S.APPROVED, _S.REJECTED) and expired:
                return ProposalRefusal(
                    code=PROPOSAL_CONFLICT, message=f"proposal {proposal_id} has expired"
                )
            if status == _S.EXPIRED and not expired:
                return ProposalRefusal(
                    code=PROPOSAL_CONFLICT, message="the proposal has not reached its deadline"
                )
            # Only a promoted master's recovery re-records a dispatch, and only once.
            redispatch = current.status == _S.DISPATCHED and status == _S.DISPATCHED
            if redispatch and (current.reissued or not command.reissued):
                return ProposalRefusal(
                    code=PROPOSAL_CONFLICT, message="already dispatched (reissued at most once)"
                )
            return [
                ProposalChanged(
                    proposal_id=proposal_id,
                    status=status,
                    at=now,
                    decided_by=command.decided_by,
                    outcome=command.outcome,
                    dispatch_command_id=command.dispatch_command_id,
                    reissued=command.reissued,
                )
            ]


def _prunable(proposal: StewardProposal, now: datetime) -> bool:
    if proposal.status in TERMINAL:
        return True
    return (
        proposal.status == _S.DISPATCHED
        and proposal.dispatched_at is not None
        and now - proposal.dispatched_at > RECOVERY_WINDOW
    )


def _pruned(records: tuple[StewardProposal, ...], now: datetime) -> tuple[StewardProposal, ...]:
    excess = len(records) - MAX_RECORDS
    if excess <= 0:
        return records
    kept: list[StewardProposal] = []
    for record in records:  # oldest first
        if excess > 0 and _prunable(record, now):
            excess -= 1
            continue
        kept.append(record)
    return tuple(kept)


def apply_proposal(state: State, event: ProposalCreated | ProposalChanged) -> State:
    match event:
        case ProposalCreated(proposal=proposal):
            records = _pruned((*state.steward_proposals, proposal), proposal.created_at)
            return msgspec.structs.replace(state, steward_proposals=records)
        case ProposalChanged():
            return msgspec.structs.replace(
                state,
                steward_proposals=tuple(
                    _changed(p, event) if p.proposal_id == event.proposal_id else p
                    for p in state.steward_proposals
                ),
            )


def _changed(proposal: StewardProposal, event: ProposalChanged) -> StewardProposal:
    fields: dict[str, object] = {"status": event.status}
    if event.status in (_S.APPROVED, _S.REJECTED):
        fields["decided_at"] = event.at
        fields["decided_by"] = event.decided_by
    if event.outcome is not None:
        fields["outcome"] = event.outcome[:400]
    if event.status == _S.DISPATCHED:
        if event.dispatch_command_id is not None:
            fields["dispatch_command_id"] = event.dispatch_command_id
        if not event.reissued:
            fields["dispatched_at"] = event.at
        fields["reissued"] = proposal.reissued or event.reissued
    return msgspec.structs.replace(proposal, **fields)


def note_instance_effect(
    state: State, *, created: InstanceId | None = None, deleted: InstanceId | None = None
) -> State:
    """Mark the dispatched proposals whose effect this instance event is."""

    def hit(p: StewardProposal) -> bool:
        if p.status != _S.DISPATCHED or p.effect_seen:
            return False
        if created is not None and str(p.dispatch_command_id) == str(created):
            return True
        return (
            deleted is not None
            and p.action == ProposalAction.STOP_MODEL
            and (p.instance_id == deleted)
        )

    if not any(hit(p) for p in state.steward_proposals):
        return state
    return msgspec.structs.replace(
        state,
        steward_proposals=tuple(
            msgspec.structs.replace(p, effect_seen=True) if hit(p) else p
            for p in state.steward_proposals
        ),
    )
