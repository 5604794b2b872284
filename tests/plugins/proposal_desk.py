"""A provider with the proposal review and owner action facets, written only against
``skulk.extensions``: the tests load it in-process and serve it from a real owner
runtime process (``owner_host --site``), so both paths run the same code.

Node ``desk-1`` retains three proposals: ``rent-1`` (approval acknowledged, with a
pending reconciliation), ``flaky-1`` (the approval is interrupted; an explicit resume
finishes it) and ``closed-1`` (approval unavailable: ``approvalRevision`` is null).
Its journal keeps the original intent of every operation id and counts effects, so a
test can prove that a replay or an observation performed none.
"""

from __future__ import annotations

import time
from typing import Any

from skulk.extensions import (
    ConfigurableNode,
    NodeConfigurationRefused,
    UnknownNode,
)
from skulk.extensions.proposal_actions import (
    ProposalApproval,
    ProposalOperation,
    ProposalReconciliation,
)
from skulk.extensions.proposals import (
    ProposalField,
    ProposalPage,
    ProposalReference,
    ProposalReview,
    ProposalSummary,
)

NODE = "desk-1"
DIGESTS = {"rent-1": "a" * 64, "flaky-1": "b" * 64, "closed-1": "c" * 64}
TERMS = {"rent-1": "1" * 64, "flaky-1": "2" * 64, "closed-1": None}


class ProposalDesk:
    plugin_id = "desk"

    def __init__(self) -> None:
        self.terms: dict[str, str | None] = dict(TERMS)
        self.journal: dict[str, tuple[ProposalApproval, ProposalOperation]] = {}
        self.effects = 0
        self.operators: list[str] = []

    async def configuration_nodes(self) -> list[ConfigurableNode]:
        return [
            ConfigurableNode(
                node_id=NODE,
                bundle_id="proposal-desk",
                version="1.0.0",
                status="ready",
                configurable=False,
                proposals_available=True,
                proposal_actions_available=True,
            )
        ]

    async def node_configuration(self, node_id: str) -> Any:
        raise UnknownNode(node_id)

    async def configure_node(self, node_id: str, mutation: Any) -> Any:
        raise UnknownNode(node_id)

    def _reference(self, proposal_id: str) -> ProposalReference:
        return ProposalReference(
            plugin_id=self.plugin_id,
            node_id=NODE,
            proposal_id=proposal_id,
            proposal_digest=DIGESTS[proposal_id],
        )

    def _summary(self, proposal_id: str) -> ProposalSummary:
        return ProposalSummary(
            reference=self._reference(proposal_id),
            summary=f"Rent a desk ({proposal_id})",
            expires_at=int(time.time()) + 3600,
            state="pending",
        )

    async def node_proposals(self, node_id: str, offset: int) -> ProposalPage:
        return ProposalPage(proposals=tuple(self._summary(p) for p in DIGESTS)[offset:])

    async def node_proposal(self, reference: ProposalReference) -> ProposalReview:
        if DIGESTS.get(reference.proposal_id) != reference.proposal_digest:
            raise NodeConfigurationRefused("no retained proposal has that id and digest")
        return ProposalReview(
            proposal=self._summary(reference.proposal_id),
            observed_at=int(time.time()),
            fields=(ProposalField(label="Price", value="3 credits per hour"),),
            approval_revision=self.terms[reference.proposal_id],
        )

    async def approve_node_proposal(
        self, mutation: ProposalApproval, operator_id: str
    ) -> ProposalOperation:
        retained = self.journal.get(mutation.operation_id)
        if retained is not None:
            if retained[0] != mutation:
                raise NodeConfigurationRefused("that operation id holds another intent")
            return retained[1]
        proposal = mutation.reference.proposal_id
        if DIGESTS.get(proposal) != mutation.reference.proposal_digest:
            raise NodeConfigurationRefused("no retained proposal has that id and digest")
        if self.terms.get(proposal) != mutation.review_revision:
            raise NodeConfigurationRefused("the reviewed terms changed")
        self.effects += 1
        self.operators.append(operator_id)
        if proposal == "flaky-1":
            operation = self._operation(mutation, "approval_interrupted", code="signer_offline")
        else:
            reconciliation = ProposalReconciliation(state="pending", observed_at=None, stale=True)
            operation = self._operation(mutation, "acknowledged", reconciliation=reconciliation)
        self.journal[mutation.operation_id] = (mutation, operation)
        return operation

    def _operation(self, mutation: ProposalApproval, phase: Any, **extra: Any) -> ProposalOperation:
        return ProposalOperation(
            operation_id=mutation.operation_id,
            reference=mutation.reference,
            phase=phase,
            updated_at=int(time.time()),
            **extra,
        )

    async def node_proposal_operation(self, node_id: str, operation_id: str) -> ProposalOperation:
        if node_id != NODE or operation_id not in self.journal:
            raise UnknownNode(operation_id)
        return self.journal[operation_id][1]

    async def resume_node_proposal(
        self, node_id: str, operation_id: str, operator_id: str
    ) -> ProposalOperation:
        approval, operation = self.journal[operation_id]
        if operation.phase != "approval_interrupted":
            return operation  # observed only: never replayed
        self.effects += 1
        self.operators.append(operator_id)
        finished = self._operation(approval, "succeeded")
        self.journal[operation_id] = (approval, finished)
        return finished


class ManagedDesk(ProposalDesk):
    plugin_id = "managed.desk"
