"""Durable nonbillable setup actions through the configuration door: one installed
node's action forms, starts, retained operations and explicit resumes, for in-process
``NodeSetupActionsProvider`` extensions and managed owners alike.

Through the same bounded dispatch as configuration (eight in flight, thirty seconds).
Skulk checks what it can before the provider: the node declares
``setup_actions_available``; an action's form declares no write-only or password
field; a start's encoded intent is at most 16 KiB, names an installed action whose
``requires_approval`` it reviewed, and (unless it reuses a retained operation id, which
the provider answers from its journal or refuses as changed intent) carries the
current configuration, credential and action fences. Answers must name the exact node,
operation and action. :meth:`SetupActions.needs_approval` tells the route whether
``plugins:approve`` is required too (the action or the retained operation says so).
Nothing here enables a node, approves spending or replays an uncertain submission.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from skulk_core.extensions.setup_actions import (
    MAX_SETUP_INTENT_BYTES,
    NodeSetupActions,
    SetupAction,
    SetupOperation,
    SetupStart,
)
from skulk_daemon.plugins.configuration import (
    ConfigurationFailure,
    InProcess,
    NodeConfigurations,
    declares_secret,
)
from skulk_host.plugin_owners import wire

if TYPE_CHECKING:
    from skulk_daemon.plugins.owners.adapter import ManagedOwner

MAX_SETUP_ACTIONS_BYTES: Final = 128 * 1024
_METHODS: Final = {
    "setup-actions": "node_setup_actions",
    "setup-start": "start_node_setup",
    "setup-operation": "node_setup_operation",
    "setup-resume": "resume_node_setup",
}


class SetupActions:
    def __init__(self, door: NodeConfigurations) -> None:
        self.door = door

    async def _target(self, plugin_id: str, node_id: str) -> InProcess | ManagedOwner:
        target = self.door.target(plugin_id)
        node = await self.door.node(target, node_id)
        supported = (
            all(callable(getattr(target.provider, m, None)) for m in _METHODS.values())
            if isinstance(target, InProcess)
            else "setup_actions" in target.facets
        )
        if not supported or not node.setup_actions_available:
            raise ConfigurationFailure("not_found", f"node {node_id} offers no setup actions")
        return target

    async def _ask(
        self, target: InProcess | ManagedOwner, op: str, node_id: str, arg: SetupStart | str | None
    ) -> object:
        if isinstance(target, InProcess):
            handler = getattr(target.provider, _METHODS[op])
            args = (node_id,) if arg is None else (node_id, arg)
            return msgspec.to_builtins(await self.door.dispatch(lambda: handler(*args)))
        owners = self.door.owners
        assert owners is not None
        message: dict[str, object] = {"op": op, "node_id": node_id}
        if isinstance(arg, SetupStart):
            message["start"] = msgspec.to_builtins(arg)
        elif arg is not None:
            message["operation_id"] = arg
        return await self.door.dispatch(
            lambda: owners.ask(target.plugin_id, message, wire.MANAGEMENT_TIMEOUT_SECONDS)
        )

    async def actions(self, plugin_id: str, node_id: str) -> NodeSetupActions:
        target = await self._target(plugin_id, node_id)
        raw = await self._ask(target, "setup-actions", node_id, None)
        listing = _valid(raw, NodeSetupActions)
        if listing.node_id != node_id or any(o.node_id != node_id for o in listing.operations):
            raise ConfigurationFailure("refused", "the provider answered for another node")
        if any(declares_secret(a.parameters_schema) for a in listing.actions):
            raise ConfigurationFailure(
                "refused", "a setup form declares secret fields; credentials use their routes"
            )
        if len(msgspec.json.encode(listing)) > MAX_SETUP_ACTIONS_BYTES:
            raise ConfigurationFailure("refused", "the provider's answer is over its bound")
        return listing

    async def needs_approval(
        self, plugin_id: str, node_id: str, action_id: str | None, operation_id: str | None
    ) -> bool:
        """Whether ``plugins:approve`` is needed too: the current action, or the
        retained operation, requires approval access."""
        listing = await self.actions(plugin_id, node_id)
        retained = next((o for o in listing.operations if o.operation_id == operation_id), None)
        if operation_id is not None and retained is None:
            raise ConfigurationFailure("not_found", f"no retained setup operation {operation_id}")
        action_id = action_id or (None if retained is None else retained.action_id)
        action = _action(listing, action_id) if action_id else None
        return bool(
            (action is not None and action.requires_approval)
            or (retained is not None and retained.requires_approval)
        )

    async def start(self, plugin_id: str, node_id: str, start: SetupStart) -> SetupOperation:
        if len(msgspec.json.encode(start)) > MAX_SETUP_INTENT_BYTES:
            raise ConfigurationFailure("malformed", "the encoded setup intent is over 16 KiB")
        listing = await self.actions(plugin_id, node_id)
        action = _action(listing, start.action_id)
        if action is None:
            raise ConfigurationFailure("not_found", f"no installed setup action {start.action_id}")
        if start.expected_requires_approval != action.requires_approval:
            raise ConfigurationFailure(
                "refused", "the action's approval requirement changed; review it again"
            )
        retained = any(o.operation_id == start.operation_id for o in listing.operations)
        fences = (
            (start.expected_revision, listing.revision),
            (start.expected_schema_digest, listing.schema_digest),
            (start.expected_credential_revision, listing.credential_revision),
            (start.expected_credential_schema_digest, listing.credential_schema_digest),
            (start.expected_action_schema_digest, action.schema_digest),
        )
        if not retained and any(expected != current for expected, current in fences):
            raise ConfigurationFailure(
                "refused", "the node's configuration, credentials or action changed; reload"
            )
        target = await self._target(plugin_id, node_id)
        operation = _operation(await self._ask(target, "setup-start", node_id, start), node_id)
        if (operation.operation_id, operation.action_id) != (start.operation_id, action.action_id):
            raise ConfigurationFailure("refused", "the provider answered for another operation")
        return operation

    async def operation(self, plugin_id: str, node_id: str, operation_id: str) -> SetupOperation:
        target = await self._target(plugin_id, node_id)
        raw = await self._ask(target, "setup-operation", node_id, operation_id)
        return _same(_operation(raw, node_id), operation_id)

    async def resume(self, plugin_id: str, node_id: str, operation_id: str) -> SetupOperation:
        target = await self._target(plugin_id, node_id)
        raw = await self._ask(target, "setup-resume", node_id, operation_id)
        return _same(_operation(raw, node_id), operation_id)


def _action(listing: NodeSetupActions, action_id: str | None) -> SetupAction | None:
    return next((a for a in listing.actions if a.action_id == action_id), None)


def _valid(raw: object, kind: type[NodeSetupActions]) -> NodeSetupActions:
    try:
        return msgspec.convert(msgspec.to_builtins(raw), kind)
    except (msgspec.ValidationError, TypeError):
        raise ConfigurationFailure("refused", "the provider's answer is invalid") from None


def _operation(raw: object, node_id: str) -> SetupOperation:
    try:
        found = msgspec.convert(msgspec.to_builtins(raw), SetupOperation)
    except (msgspec.ValidationError, TypeError):
        raise ConfigurationFailure("refused", "the provider's answer is invalid") from None
    if found.node_id != node_id:
        raise ConfigurationFailure("refused", "the provider answered for another node")
    return found


def _same(operation: SetupOperation, operation_id: str) -> SetupOperation:
    if operation.operation_id != operation_id:
        raise ConfigurationFailure("refused", "the provider answered for another operation")
    return operation
