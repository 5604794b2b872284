"""``skulk.extensions.proposal_actions``: the distinct owner proposal action facet
(``NodeProposalActionsProvider``: approve, observe, explicitly resume) and its bounded
types. Re-exports ``skulk_core.extensions.proposals``."""

from skulk_core.extensions.proposals import (
    MAX_ACTION_RESPONSE_BYTES,
    RESUMABLE_PHASE,
    NodeProposalActionsProvider,
    ProposalApproval,
    ProposalOperation,
    ProposalPhase,
    ProposalReconciliation,
    ProposalReference,
    ReconciliationState,
)

__all__ = [
    "MAX_ACTION_RESPONSE_BYTES",
    "RESUMABLE_PHASE",
    "NodeProposalActionsProvider",
    "ProposalApproval",
    "ProposalOperation",
    "ProposalPhase",
    "ProposalReconciliation",
    "ProposalReference",
    "ReconciliationState",
]
