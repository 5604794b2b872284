"""The distinct owner proposal actions through the configuration door: approve one
exactly reviewed proposal, observe the retained action, explicitly resume an
interrupted approval; for in-process ``NodeProposalActionsProvider`` extensions and
managed owners (``proposal-approve`` / ``proposal-operation`` / ``proposal-resume``).

Through the same bounded dispatch as configuration (eight in flight, thirty seconds).
Skulk checks what it can before the provider, which checks again under its own lock:

- the node declares ``proposal_actions_available`` and the provider implements the
  facet (else 404);
- the route names the reference's plugin, node and proposal (else 409);
- an approval whose operation id the provider does not retain must name the current
  review fence: where the node offers review, a fresh exact review is read and its
  ``approval_revision`` must equal ``review_revision`` (``None`` refuses). A retained id
  goes straight to the provider, which answers the identical request with its retained
  work and refuses changed intent;
- a resume continues only an ``approval_interrupted`` action: submitted, acknowledged
  and uncertain work is observed, never replayed.

Answers must name the exact operation and reference and are bounded to 16 KiB. The
operator id is the actor the API authenticated; no caller supplies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from skulk_core.extensions.proposals import (
    MAX_ACTION_RESPONSE_BYTES,
    RESUMABLE_PHASE,
    ProposalApproval,
    ProposalOperation,
    ProposalReference,
)
from skulk_daemon.plugins.configuration import (
    ConfigurationFailure,
    InProcess,
    NodeConfigurations,
)
from skulk_host.plugin_owners import wire

if TYPE_CHECKING:
    from skulk_daemon.plugins.owners.adapter import ManagedOwner

_METHODS = {
    "proposal-approve": "approve_node_proposal",
    "proposal-operation": "node_proposal_operation",
    "proposal-resume": "resume_node_proposal",
}


def provides_actions(provider: object) -> bool:
    return all(callable(getattr(provider, m, None)) for m in _METHODS.values())


class ProposalActions:
    def __init__(self, door: NodeConfigurations) -> None:
        self.door = door

    async def _target(self, plugin_id: str, node_id: str) -> tuple[InProcess | ManagedOwner, bool]:
        """The provider, and whether the node offers review too."""
        target = self.door.target(plugin_id)
        node = await self.door.node(target, node_id)
        if isinstance(target, InProcess):
            supported = provides_actions(target.provider)
            reviews = callable(getattr(target.provider, "node_proposal", None))
        else:
            supported = "proposal_actions" in target.facets
            reviews = "proposals" in target.facets
        if not supported or not node.proposal_actions_available:
            raise ConfigurationFailure("not_found", f"node {node_id} offers no proposal actions")
        return target, reviews and node.proposals_available

    async def _ask(
        self, target: InProcess | ManagedOwner, op: str, args: Mapping[str, object]
    ) -> object:
        if isinstance(target, InProcess):
            handler = getattr(target.provider, _METHODS[op])
            call: tuple[object, ...]
            match op:
                case "proposal-approve":
                    call = (args["approval"], args["operator_id"])
                case "proposal-operation":
                    call = (args["node_id"], args["operation_id"])
                case _:
                    call = (args["node_id"], args["operation_id"], args["operator_id"])
            return msgspec.to_builtins(await self.door.dispatch(lambda: handler(*call)))
        owners = self.door.owners
        assert owners is not None
        message: dict[str, object] = {"op": op, "plugin_id": target.plugin_id, **args}
        if "approval" in message:
            message["approval"] = msgspec.to_builtins(message["approval"])
        return await self.door.dispatch(
            lambda: owners.ask(target.plugin_id, message, wire.MANAGEMENT_TIMEOUT_SECONDS)
        )

    async def _retained(
        self, target: InProcess | ManagedOwner, node_id: str, operation_id: str
    ) -> ProposalOperation | None:
        args = {"node_id": node_id, "operation_id": operation_id}
        try:
            raw = await self._ask(target, "proposal-operation", args)
        except ConfigurationFailure as failure:
            if failure.kind == "not_found":
                return None
            raise
        return _operation(raw, target.plugin_id, node_id, operation_id)

    async def approve(
        self, plugin_id: str, node_id: str, proposal_id: str, approval: ProposalApproval, actor: str
    ) -> ProposalOperation:
        reference = approval.reference
        if (reference.plugin_id, reference.node_id, reference.proposal_id) != (
            plugin_id,
            node_id,
            proposal_id,
        ):
            raise ConfigurationFailure(
                "refused", "the reference names another plugin, node or proposal than the route"
            )
        target, reviews = await self._target(plugin_id, node_id)
        retained = await self._retained(target, node_id, approval.operation_id)
        if retained is not None and retained.reference != reference:
            raise ConfigurationFailure(
                "refused", "that operation id is retained for another proposal (changed intent)"
            )
        if retained is None and reviews:
            review = await self.door.proposal(reference)
            if review.approval_revision is None:
                raise ConfigurationFailure(
                    "refused", "the provider offers no approval for this proposal now"
                )
            if review.approval_revision != approval.review_revision:
                raise ConfigurationFailure(
                    "refused", "the reviewed terms changed; review the proposal again"
                )
        args = {"approval": approval, "operator_id": actor}
        raw = await self._ask(target, "proposal-approve", args)
        found = _operation(raw, plugin_id, node_id, approval.operation_id)
        if found.reference != reference:
            raise ConfigurationFailure("refused", "the provider answered for another proposal")
        return found

    async def operation(self, plugin_id: str, node_id: str, operation_id: str) -> ProposalOperation:
        target, _ = await self._target(plugin_id, node_id)
        args = {"node_id": node_id, "operation_id": operation_id}
        raw = await self._ask(target, "proposal-operation", args)
        return _operation(raw, plugin_id, node_id, operation_id)

    async def resume(
        self, plugin_id: str, node_id: str, operation_id: str, actor: str
    ) -> ProposalOperation:
        target, _ = await self._target(plugin_id, node_id)
        retained = await self._retained(target, node_id, operation_id)
        if retained is None:
            raise ConfigurationFailure("not_found", f"no retained proposal action {operation_id}")
        if retained.phase != RESUMABLE_PHASE:
            raise ConfigurationFailure(
                "refused",
                f"the action is {retained.phase}: only an interrupted approval is resumed; "
                "observe it instead (submitted or uncertain work is never replayed)",
            )
        args = {"node_id": node_id, "operation_id": operation_id, "operator_id": actor}
        raw = await self._ask(target, "proposal-resume", args)
        found = _operation(raw, plugin_id, node_id, operation_id)
        if found.reference != retained.reference:
            raise ConfigurationFailure("refused", "the provider answered for another proposal")
        return found


def _operation(raw: object, plugin_id: str, node_id: str, operation_id: str) -> ProposalOperation:
    try:
        found = msgspec.convert(msgspec.to_builtins(raw), ProposalOperation)
    except (msgspec.ValidationError, TypeError):
        raise ConfigurationFailure("refused", "the provider's answer is invalid") from None
    reference: ProposalReference = found.reference
    if (reference.plugin_id, reference.node_id) != (plugin_id, node_id):
        raise ConfigurationFailure("refused", "the provider answered for another node")
    if found.operation_id != operation_id:
        raise ConfigurationFailure("refused", "the provider answered for another operation")
    if len(msgspec.json.encode(found)) > MAX_ACTION_RESPONSE_BYTES:
        raise ConfigurationFailure("refused", "the provider's answer is over its 16 KiB bound")
    return found
