"""``skulk.extensions.proposals``: the read-only proposal review facet
(``NodeProposalReviewProvider`` and its bounded types). Re-exports
``skulk_core.extensions.proposals``."""

from skulk_core.extensions.proposals import (
    MAX_FIELDS,
    MAX_OFFSET,
    MAX_PAGE,
    NodeProposalReviewProvider,
    ProposalField,
    ProposalPage,
    ProposalReference,
    ProposalReview,
    ProposalSummary,
)

__all__ = [
    "MAX_FIELDS",
    "MAX_OFFSET",
    "MAX_PAGE",
    "NodeProposalReviewProvider",
    "ProposalField",
    "ProposalPage",
    "ProposalReference",
    "ProposalReview",
    "ProposalSummary",
]
