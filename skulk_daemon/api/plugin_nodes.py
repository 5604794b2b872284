"""The plugin node-configuration routes: one installed node's ordinary settings, its
write-only credentials, the read-only preflight, public setup files and proposal
review, the durable setup actions (``plugins:approve`` as well where an action or
its retained operation requires approval access), and the distinct owner proposal
actions (approve and resume need ``plugins:approve``; ``plugins:manage`` never
approves; observing needs ``plugins:read``), for
in-process ``NodeConfigurationProvider`` extensions and managed owners alike
(:class:`~skulk_daemon.plugins.configuration.NodeConfigurations`).

Authority as for every plugin route (:func:`skulk_daemon.api.plugins.authorize`): reads
need ``plugins:read``, changes ``plugins:manage`` (or direct owner access); neither
enables spending. Statuses: 404 unknown plugin, node or facet; 409 a revision or
schema fence, or the provider's refusal; 422 malformed; 429 saturated (eight in
flight); 503 provider unavailable; 504 its deadline. ``Cache-Control: no-store`` on
every answer, refusals included. Credential values are accepted, never answered.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

import msgspec
from litestar import Controller, Request, get, post
from litestar.datastructures import ResponseHeader

from skulk_core.extensions.proposals import (
    MAX_OFFSET,
    PROPOSAL_DIGEST_PATTERN,
    PROPOSAL_ID_PATTERN,
    ProposalApproval,
    ProposalReference,
)
from skulk_core.extensions.setup_actions import (
    MAX_SETUP_INTENT_BYTES,
    OPERATION_ID_PATTERN,
    SetupStart,
)
from skulk_core.plugins.node_configuration import (
    NodeConfigurationMutation,
    NodeCredentialMutation,
)
from skulk_daemon.api.authority import declare
from skulk_daemon.api.errors import NO_STORE_EXCEPTION_HANDLERS
from skulk_daemon.api.openapi import documented
from skulk_daemon.api.plugins import (
    CHANGE_ERRORS,
    MAX_PLUGIN_BODY_BYTES,
    authorize,
    decode_body,
    fail,
)
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import NO_STORE_HEADERS
from skulk_daemon.operator.plugin_grants import PLUGINS_APPROVE, PLUGINS_MANAGE, PLUGINS_READ
from skulk_daemon.operator.service import OperatorPairingService
from skulk_daemon.plugins.configuration import ConfigurationFailure, NodeConfigurations
from skulk_daemon.plugins.configuration_proposals import ProposalActions
from skulk_daemon.plugins.configuration_setup import SetupActions

T = TypeVar("T")

_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


def _name(raw: str) -> str:
    if not _NAME.match(raw):
        fail(422, "plugin and node ids are 1-128 characters of A-Za-z0-9._:@-", "invalid_id")
    return raw


def _offset(raw: str | None) -> int:
    if raw is None:
        return 0
    if not re.fullmatch(r"[0-9]{1,3}", raw) or int(raw) > MAX_OFFSET:
        fail(422, f"offset is an integer in 0..{MAX_OFFSET}", "invalid_offset")
    return int(raw)


def _setup_operation_id(raw: str) -> str:
    if not re.fullmatch(OPERATION_ID_PATTERN, raw):
        fail(422, "an operation id is 32 lowercase hexadecimal characters", "invalid_id")
    return raw


def _proposal_id(raw: str) -> str:
    if not re.fullmatch(PROPOSAL_ID_PATTERN, raw):
        fail(422, "a proposal id is 1-128 characters of a-zA-Z0-9._:@-", "invalid_id")
    return raw


def _door(configurations: NodeConfigurations | None) -> NodeConfigurations:
    if configurations is None:
        fail(503, "this node serves no plugin configuration", "unavailable")
    return configurations


def _camel(value: msgspec.Struct) -> dict[str, Any]:
    encoded: dict[str, Any] = msgspec.to_builtins(value)
    return encoded


def _credential_mutation(raw: bytes) -> NodeCredentialMutation:
    """The body, decoded. NOTE: msgspec's refusals name the field and the rule, never
    the submitted value, so a refusal cannot echo a credential."""
    return decode_body(raw, NodeCredentialMutation)


async def _configured(work: Awaitable[T]) -> T:
    try:
        return await work
    except ConfigurationFailure as failure:
        match failure.kind:
            case "not_found":
                status = 404
            case "refused":
                status = 409
            case "malformed":
                status = 422
            case "busy":
                status = 429
            case "timeout":
                status = 504
            case "unavailable":
                status = 503
        fail(status, failure.message, f"plugin_{failure.kind}")


class PluginNodesController(Controller):
    path = "/v1/plugins"
    tags = ("Plugins",)
    # NOTE: the same boundary as PluginsController: the guard admits loopback without
    # proxy headers or the operator listener; each handler applies the scope rule.
    opt = declare(Requirement.DIRECT_LOOPBACK)
    request_max_body_size = MAX_PLUGIN_BODY_BYTES
    response_headers = tuple(ResponseHeader(name=k, value=v) for k, v in NO_STORE_HEADERS.items())
    exception_handlers = NO_STORE_EXCEPTION_HANDLERS  # type: ignore[assignment]

    @get(
        "/{plugin_id:str}/nodes/{node_id:str}/configuration",
        summary="One installed node's ordinary settings",
        responses=CHANGE_ERRORS,
    )
    async def node_configuration(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_READ)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        return _camel(await _configured(door.configuration(plugin, node)))

    @post(
        "/{plugin_id:str}/nodes/{node_id:str}/configuration",
        status_code=200,
        summary="Validate, edit, enable or disable one node (revision and schema fenced)",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=NodeConfigurationMutation),
    )
    async def configure_node(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_MANAGE)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        mutation = decode_body(await request.body(), NodeConfigurationMutation)
        return _camel(await _configured(door.configure(plugin, node, mutation)))

    @get(
        "/{plugin_id:str}/nodes/{node_id:str}/credentials",
        summary="One node's credential metadata (never values)",
        responses=CHANGE_ERRORS,
    )
    async def node_credentials(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_READ)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        return _camel(await _configured(door.credentials(plugin, node)))

    @post(
        "/{plugin_id:str}/nodes/{node_id:str}/credentials",
        status_code=200,
        summary="Replace or retire one write-only credential",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=NodeCredentialMutation),
    )
    async def configure_credential(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_MANAGE)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        mutation = _credential_mutation(await request.body())
        return _camel(await _configured(door.configure_credential(plugin, node, mutation)))

    @get(
        "/{plugin_id:str}/nodes/{node_id:str}/preflight",
        summary="Run the node's bounded, nonbillable setup checks",
        responses=CHANGE_ERRORS,
    )
    async def node_preflight(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_READ)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        return _camel(await _configured(door.preflight(plugin, node)))

    @get(
        "/{plugin_id:str}/nodes/{node_id:str}/setup",
        summary="The node's public setup files",
        responses=CHANGE_ERRORS,
    )
    async def node_setup(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_READ)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        return _camel(await _configured(door.setup(plugin, node)))

    @get(
        "/{plugin_id:str}/nodes/{node_id:str}/proposals",
        summary="A page of the node's retained proposals (read-only)",
        responses=CHANGE_ERRORS,
    )
    async def node_proposals(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_READ)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        offset = _offset(request.query_params.get("offset"))
        return _camel(await _configured(door.proposals(plugin, node, offset)))

    @get(
        "/{plugin_id:str}/nodes/{node_id:str}/proposals/{proposal_id:str}",
        summary="A fresh review of one exact proposal (read-only)",
        responses=CHANGE_ERRORS,
    )
    async def node_proposal(  # noqa: PLR0917 (Litestar passes path parameters by name)
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
        proposal_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_READ)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        digest = request.query_params.get("proposal_digest") or ""
        if not re.fullmatch(PROPOSAL_ID_PATTERN, proposal_id):
            fail(422, "a proposal id is 1-128 characters of a-zA-Z0-9._:@-", "invalid_id")
        if not re.fullmatch(PROPOSAL_DIGEST_PATTERN, digest):
            fail(422, "proposal_digest is 64 lowercase hexadecimal characters", "invalid_id")
        reference = ProposalReference(
            plugin_id=plugin, node_id=node, proposal_id=proposal_id, proposal_digest=digest
        )
        return _camel(await _configured(door.proposal(reference)))

    @get(
        "/{plugin_id:str}/nodes/{node_id:str}/setup-actions",
        summary="The node's installed setup actions and retained operations",
        responses=CHANGE_ERRORS,
    )
    async def setup_actions(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_READ)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        return _camel(await _configured(SetupActions(door).actions(plugin, node)))

    @post(
        "/{plugin_id:str}/nodes/{node_id:str}/setup-operations",
        status_code=200,
        summary="Start one durable, nonbillable setup action (fenced)",
        responses=CHANGE_ERRORS,
        # NOTE: read past the 16 KiB intent bound, so an oversized intent gets the
        # spec's 422 (with no-store) from the door rather than a bare 413.
        request_max_body_size=2 * MAX_SETUP_INTENT_BYTES,
        operation_class=documented(body=SetupStart),
    )
    async def start_setup(
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_MANAGE)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        start = decode_body(await request.body(), SetupStart)
        actions = SetupActions(door)
        needs = await _configured(actions.needs_approval(plugin, node, start.action_id, None))
        if needs or start.expected_requires_approval:
            await authorize(request, authority, PLUGINS_APPROVE)
        return _camel(await _configured(actions.start(plugin, node, start)))

    @get(
        "/{plugin_id:str}/nodes/{node_id:str}/setup-operations/{operation_id:str}",
        summary="One retained setup operation's last durable progress",
        responses=CHANGE_ERRORS,
    )
    async def setup_operation(  # noqa: PLR0917 (Litestar passes path parameters by name)
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
        operation_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_READ)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        checked = _setup_operation_id(operation_id)
        return _camel(await _configured(SetupActions(door).operation(plugin, node, checked)))

    @post(
        "/{plugin_id:str}/nodes/{node_id:str}/setup-operations/{operation_id:str}/resume",
        status_code=200,
        summary="Explicitly resume a retained setup operation's original intent",
        responses=CHANGE_ERRORS,
    )
    async def resume_setup(  # noqa: PLR0917 (Litestar passes path parameters by name)
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
        operation_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_MANAGE)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        checked = _setup_operation_id(operation_id)
        if (await request.body()).strip() not in (b"", b"{}"):
            fail(422, "resume takes no body (or {}): it continues the original intent", "invalid")
        actions = SetupActions(door)
        if await _configured(actions.needs_approval(plugin, node, None, checked)):
            await authorize(request, authority, PLUGINS_APPROVE)
        return _camel(await _configured(actions.resume(plugin, node, checked)))

    # -- owner proposal actions ------------------------------------------------------------

    @post(
        "/{plugin_id:str}/nodes/{node_id:str}/proposals/{proposal_id:str}/approve",
        status_code=200,
        summary="Approve and execute one exactly reviewed proposal (plugins:approve)",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=ProposalApproval),
    )
    async def approve_proposal(  # noqa: PLR0917 (Litestar passes path parameters by name)
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
        proposal_id: str,
    ) -> dict[str, Any]:
        actor = await authorize(request, authority, PLUGINS_APPROVE)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        proposal = _proposal_id(proposal_id)
        approval = decode_body(await request.body(), ProposalApproval)
        actions = ProposalActions(door)
        return _camel(await _configured(actions.approve(plugin, node, proposal, approval, actor)))

    @get(
        "/{plugin_id:str}/nodes/{node_id:str}/proposal-operations/{operation_id:str}",
        summary="Observe one retained proposal action (never signs, executes or replays)",
        responses=CHANGE_ERRORS,
    )
    async def proposal_operation(  # noqa: PLR0917 (Litestar passes path parameters by name)
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
        operation_id: str,
    ) -> dict[str, Any]:
        await authorize(request, authority, PLUGINS_READ)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        checked = _setup_operation_id(operation_id)
        return _camel(await _configured(ProposalActions(door).operation(plugin, node, checked)))

    @post(
        "/{plugin_id:str}/nodes/{node_id:str}/proposal-operations/{operation_id:str}/resume",
        status_code=200,
        summary="Explicitly resume an interrupted approval (its original intent only)",
        responses=CHANGE_ERRORS,
    )
    async def resume_proposal(  # noqa: PLR0917 (Litestar passes path parameters by name)
        self,
        request: Request[Any, Any, Any],
        authority: OperatorPairingService | None,
        configurations: NodeConfigurations | None,
        plugin_id: str,
        node_id: str,
        operation_id: str,
    ) -> dict[str, Any]:
        actor = await authorize(request, authority, PLUGINS_APPROVE)
        door, plugin, node = _door(configurations), _name(plugin_id), _name(node_id)
        checked = _setup_operation_id(operation_id)
        if (await request.body()).strip() not in (b"", b"{}"):
            fail(422, "resume takes no body (or {}): it continues the original intent", "invalid")
        actions = ProposalActions(door)
        return _camel(await _configured(actions.resume(plugin, node, checked, actor)))
