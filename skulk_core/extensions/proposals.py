"""The read-only proposal review facet of an installed node (the spec's
``NodeProposalReviewProvider``): bounded journal metadata, never execution authority.

``node_proposals(node_id, offset)`` returns a :class:`ProposalPage` (at most sixteen
:class:`ProposalSummary` entries and an optional next offset); ``node_proposal(reference)``
returns a :class:`ProposalReview` of the exact :class:`ProposalReference` (plugin, stable
node, opaque proposal id and immutable digest: the provider must match both id and
digest against its retained record). Reviews carry up to 32 plain-text fields and the
provider's current ``approval_revision`` fence (or ``None`` when approval is
unavailable). Secrets, canonical executable input and approval material stay with the
provider. Advertise support with ``ConfigurableNode.proposals_available``.

The distinct owner action facet (the spec's ``NodeProposalActionsProvider``, public as
``skulk.extensions.proposal_actions``): ``approve_node_proposal(approval, operator_id)``
takes a :class:`ProposalApproval` (only the durable operation id, the exact reference
and the reviewed ``review_revision``; the operator id is the authenticated actor the
API supplies), ``node_proposal_operation(node_id, operation_id)`` observes and
``resume_node_proposal(node_id, operation_id, operator_id)`` explicitly recovers an
interrupted approval; each returns a bounded :class:`ProposalOperation`. Providers
retain the original intent before any effect, revalidate the exact reviewed terms,
answer an identical accepted request with the retained work, refuse changed intent, and
never replay submitted or uncertain work. Advertise with
``ConfigurableNode.proposal_actions_available`` (independently of review). Never a
steward tool, never authorized by management permission alone.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, Protocol, runtime_checkable

import msgspec

MAX_PAGE: Final = 16
MAX_OFFSET: Final = 127
MAX_FIELDS: Final = 32
MAX_PROPOSAL_RESPONSE_BYTES: Final = 128 * 1024
PROPOSAL_ID_PATTERN: Final = r"^[a-zA-Z0-9._:@-]{1,128}$"
PROPOSAL_DIGEST_PATTERN: Final = r"^[0-9a-f]{64}$"
OPERATION_ID_PATTERN: Final = r"^[0-9a-f]{32}$"
MAX_ACTION_RESPONSE_BYTES: Final = 16 * 1024
MAX_CORRECTIVE_ACTION: Final = 512

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class ProposalReference(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    plugin_id: _Id
    node_id: _Id
    proposal_id: Annotated[str, msgspec.Meta(pattern=PROPOSAL_ID_PATTERN)]
    proposal_digest: Annotated[str, msgspec.Meta(pattern=PROPOSAL_DIGEST_PATTERN)]


class ProposalSummary(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    reference: ProposalReference
    summary: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
    expires_at: Annotated[int, msgspec.Meta(ge=0)]
    """UTC Unix seconds."""
    state: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class ProposalPage(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    proposals: Annotated[tuple[ProposalSummary, ...], msgspec.Meta(max_length=MAX_PAGE)]
    next_offset: Annotated[int, msgspec.Meta(ge=1, le=MAX_OFFSET)] | None = None


class ProposalField(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    label: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    value: Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]


class ProposalReview(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    proposal: ProposalSummary
    observed_at: Annotated[int, msgspec.Meta(ge=0)]
    fields: Annotated[tuple[ProposalField, ...], msgspec.Meta(min_length=1, max_length=MAX_FIELDS)]
    approval_revision: Annotated[str, msgspec.Meta(pattern=PROPOSAL_DIGEST_PATTERN)] | None = None
    """The provider's current review fence (what an approval must name), or ``None``."""


# -- owner actions ---------------------------------------------------------------------

ProposalPhase = Literal[
    "accepted",
    "approving",
    "approved",
    "dispatching",
    "acknowledged",
    "succeeded",
    "refused",
    "approval_interrupted",
    "uncertain",
]
ReconciliationState = Literal["pending", "active", "releasing", "absent", "attention", "unknown"]
RESUMABLE_PHASE: Final = "approval_interrupted"
"""The only phase an explicit resume continues; every other one is observed only."""

_OperationId = Annotated[str, msgspec.Meta(pattern=OPERATION_ID_PATTERN)]
_Code = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]


class ProposalApproval(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """One approval: nothing but the durable id, the exact reference and its fence (no
    actor, executable input or approval proof is accepted from a caller)."""

    operation_id: _OperationId
    reference: ProposalReference
    review_revision: Annotated[str, msgspec.Meta(pattern=PROPOSAL_DIGEST_PATTERN)]


class ProposalReconciliation(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Later cleanup evidence beside the original phase (historical receipts, never a
    new provider inventory query or a readiness claim)."""

    state: ReconciliationState
    observed_at: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """The cleanup journal read time (UTC seconds); ``None`` before any observation."""
    stale: bool = False
    code: _Code | None = None


class ProposalOperation(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    operation_id: _OperationId
    reference: ProposalReference
    phase: ProposalPhase
    updated_at: Annotated[int, msgspec.Meta(ge=0)]
    """UTC Unix seconds."""
    code: _Code | None = None
    corrective_action: Annotated[str, msgspec.Meta(max_length=MAX_CORRECTIVE_ACTION)] | None = None
    reconciliation: ProposalReconciliation | None = None


@runtime_checkable
class NodeProposalActionsProvider(Protocol):
    async def approve_node_proposal(
        self, mutation: ProposalApproval, operator_id: str
    ) -> ProposalOperation: ...

    async def node_proposal_operation(
        self, node_id: str, operation_id: str
    ) -> ProposalOperation: ...

    async def resume_node_proposal(
        self, node_id: str, operation_id: str, operator_id: str
    ) -> ProposalOperation: ...


@runtime_checkable
class NodeProposalReviewProvider(Protocol):
    async def node_proposals(self, node_id: str, offset: int) -> ProposalPage: ...

    async def node_proposal(self, reference: ProposalReference) -> ProposalReview: ...
