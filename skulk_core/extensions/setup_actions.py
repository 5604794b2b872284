"""Durable nonbillable setup actions of an installed node (the spec's
``skulk.extensions.setup_actions.NodeSetupActionsProvider``).

A provider lists up to eight :class:`SetupAction` forms (ordinary external inputs only:
a schema declaring write-only or password fields is refused by Skulk) and up to 32
retained :class:`SetupOperation` observations (:class:`NodeSetupActions`). A start
(:class:`SetupStart`) carries a durable 32-hex operation id and the exact
configuration, credential and action fences, including the reviewed
``expected_requires_approval``; the provider reserves the intent before any effect
and returns promptly (the background work is its own). Reusing an operation id with
other intent must be refused; a resume continues only the original intent. Nothing
here enables a node or approves spending. Advertise with
``ConfigurableNode.setup_actions_available``.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, Protocol, runtime_checkable

import msgspec

MAX_ACTIONS: Final = 8
MAX_OPERATIONS: Final = 32
MAX_SETUP_INTENT_BYTES: Final = 16 * 1024
OPERATION_ID_PATTERN: Final = "^[0-9a-f]{32}$"

_Digest = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
_Revision = Annotated[int, msgspec.Meta(ge=0)]
_ActionId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
_OperationId = Annotated[str, msgspec.Meta(pattern=OPERATION_ID_PATTERN)]
SetupPhase = Literal["queued", "running", "complete", "failed"]


class SetupAction(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    action_id: _ActionId
    title: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    parameters_schema: dict[str, Any]
    schema_digest: _Digest
    description: Annotated[str, msgspec.Meta(max_length=1024)] = ""
    requires_approval: bool = False


class SetupOperation(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    operation_id: _OperationId
    node_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    action_id: _ActionId
    requires_approval: bool
    phase: SetupPhase
    code: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")] | None = None
    corrective_action: Annotated[str, msgspec.Meta(max_length=1024)] | None = None


class NodeSetupActions(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    revision: _Revision
    schema_digest: _Digest
    credential_revision: _Revision
    credential_schema_digest: _Digest
    actions: Annotated[tuple[SetupAction, ...], msgspec.Meta(max_length=MAX_ACTIONS)]
    operations: Annotated[tuple[SetupOperation, ...], msgspec.Meta(max_length=MAX_OPERATIONS)]


class SetupStart(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """One start, with every fence the client reviewed."""

    operation_id: _OperationId
    action_id: _ActionId
    values: dict[str, Any]
    expected_revision: _Revision
    expected_schema_digest: _Digest
    expected_credential_revision: _Revision
    expected_credential_schema_digest: _Digest
    expected_action_schema_digest: _Digest
    expected_requires_approval: bool = False


@runtime_checkable
class NodeSetupActionsProvider(Protocol):
    async def node_setup_actions(self, node_id: str) -> NodeSetupActions: ...

    async def start_node_setup(self, node_id: str, start: SetupStart) -> SetupOperation: ...

    async def node_setup_operation(self, node_id: str, operation_id: str) -> SetupOperation: ...

    async def resume_node_setup(self, node_id: str, operation_id: str) -> SetupOperation: ...
