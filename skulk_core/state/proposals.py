"""Steward action proposals as State records them (the spec's proposal audit).

A proposal is inert: the steward's proposal tools create one, an operator decides it,
and only then does the master dispatch the action through the ordinary typed commands.
The internal target (instance, node, model) and the dispatch command's id stay in State
for revalidation and failover recovery; the API shows only the safe fields.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

import msgspec

from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId

HARNESS_LIFETIME: Final = timedelta(minutes=10)
"""How long a proposal created by the built-in harness waits for a decision."""
MAX_LIFETIME: Final = timedelta(minutes=15)
MAX_PENDING: Final = 32
MAX_RECORDS: Final = 128
"""The audit window State targets (oldest completed terminal records pruned first)."""
RECOVERY_WINDOW: Final = timedelta(minutes=5)
"""After dispatch, a promoted master checks the effect and reissues it once."""
RESTART_CAPACITY_WAIT: Final = timedelta(minutes=5)
MAX_TEXT_CHARS: Final = 400
MAX_EVIDENCE_CHARS: Final = 1200


class ProposalAction(StrEnum):
    PLACE_MODEL = "place_model"
    STOP_MODEL = "stop_model"
    RESTART_MODEL = "restart_model"
    CANCEL_DOWNLOAD = "cancel_download"


class ProposalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DISPATCHED = "dispatched"
    REJECTED = "rejected"
    EXPIRED = "expired"
    FAILED = "failed"


TERMINAL: Final = frozenset(
    {ProposalStatus.REJECTED, ProposalStatus.EXPIRED, ProposalStatus.FAILED}
)


class StewardProposal(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    proposal_id: str
    created_at: datetime
    expires_at: datetime
    action: ProposalAction
    target_label: str
    rationale: str
    evidence: str
    expected_effect: str
    status: ProposalStatus = ProposalStatus.PENDING
    decided_at: datetime | None = None
    decided_by: str | None = None
    outcome: str | None = None
    # Internal: what was selected when proposed, and the dispatch's exact identity.
    model_id: ModelId | None = None
    instance_id: InstanceId | None = None
    node_id: NodeId | None = None
    attempt_id: str | None = None
    """``cancel_download``: the exact transfer attempt selected (a retry is another)."""
    dispatch_command_id: CommandId | None = None
    dispatched_at: datetime | None = None
    reissued: bool = False
    effect_seen: bool = False
    """The dispatched effect was applied (an instance created under the dispatch's id,
    or the stopped instance deleted): a promoted master never reissues it, even once a
    later action removed what it made."""


class ProposalView(msgspec.Struct, frozen=True, kw_only=True):
    """One item of ``GET /v1/steward/proposals``: no node, instance or command ids."""

    proposal_id: str
    created_at: datetime
    expires_at: datetime
    action: ProposalAction
    target: str
    rationale: str
    evidence: str
    expected_effect: str
    status: ProposalStatus
    decided_at: datetime | None = None
    decided_by: str | None = None
    outcome: str | None = None


def view_of(proposal: StewardProposal) -> ProposalView:
    return ProposalView(
        proposal_id=proposal.proposal_id,
        created_at=proposal.created_at,
        expires_at=proposal.expires_at,
        action=proposal.action,
        target=proposal.target_label,
        rationale=proposal.rationale,
        evidence=proposal.evidence,
        expected_effect=proposal.expected_effect,
        status=proposal.status,
        decided_at=proposal.decided_at,
        decided_by=proposal.decided_by,
        outcome=proposal.outcome,
    )
