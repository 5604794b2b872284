"""The plugin node-configuration routes: one installed node's ordinary settings, its
write-only credentials, the read-only preflight, public setup files and proposal
review, the durable setup actions (``plugins:approve`` as well where an action or
its retained operation requires approval access), and the distinct owner proposal
actions (approve and resume need ``plugins:approve``; ``plugins:manage`` never
approves; observing needs ``plugins:read``), for
in-process ``NodeConfigurationProvider`` extensions and managed owners alike
(:class:`~skulk_daemon.plugins.configuration.NodeConfigurations`).

Authority as for every plugin route (``plugin_authority.py``): reads need
``plugins:read``, changes ``plugins:manage`` (or direct owner access); neither enables
spending. Every handler takes one :class:`NodeTarget` (the ``target`` dependency): the
rule applied, the door, and the plugin and node ids checked. Statuses: 404 unknown
plugin, node or facet; 409 a revision or schema fence, or the provider's refusal; 422
malformed; 429 saturated (eight in flight); 503 provider unavailable; 504 its deadline.
``Cache-Control: no-store`` on every answer, refusals included. Credential values are
accepted, never answered.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Final, TypeVar

from litestar.di import Provide

from skulk_core.extensions.node_setup import NodePreflight, NodeSetup
from skulk_core.extensions.proposals import (
    MAX_OFFSET,
    PROPOSAL_DIGEST_PATTERN,
    PROPOSAL_ID_PATTERN,
    ProposalApproval,
    ProposalOperation,
    ProposalPage,
    ProposalReference,
    ProposalReview,
)
from skulk_core.extensions.setup_actions import (
    MAX_SETUP_INTENT_BYTES,
    OPERATION_ID_PATTERN,
    NodeSetupActions,
    SetupOperation,
    SetupStart,
)
from skulk_core.plugins.node_configuration import (
    NodeConfiguration,
    NodeConfigurationMutation,
    NodeConfigurationResult,
    NodeCredentialMutation,
    NodeCredentials,
)
from skulk_daemon.api.plugin_authority import (
    CALLER,
    CHANGE_ERRORS,
    PluginCaller,
    changes,
    fail,
    reads,
)
from skulk_daemon.api.plugins import PluginControllerBase
from skulk_daemon.operator.plugin_grants import PLUGINS_APPROVE, PLUGINS_MANAGE
from skulk_daemon.plugins.configuration import ConfigurationFailure, NodeConfigurations
from skulk_daemon.plugins.configuration_proposals import ProposalActions
from skulk_daemon.plugins.configuration_setup import SetupActions

T = TypeVar("T")

_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
RESUME_TAKES_NO_BODY: Final = "resume takes no body (or {}): it continues the original intent"


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


@dataclass(frozen=True, slots=True)
class NodeTarget:
    """One admitted request about one installed node: the caller, the door, the ids."""

    caller: PluginCaller
    door: NodeConfigurations
    plugin: str
    node: str

    @property
    def setup(self) -> SetupActions:
        return SetupActions(self.door)

    @property
    def proposals(self) -> ProposalActions:
        return ProposalActions(self.door)

    async def answer(self, work: Awaitable[T]) -> T:
        """``work``'s answer, or the status its provider's failure maps to."""
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


async def _target(
    caller: PluginCaller, configurations: NodeConfigurations | None, plugin_id: str, node_id: str
) -> NodeTarget:
    if configurations is None:
        fail(503, "this node serves no plugin configuration", "unavailable")
    return NodeTarget(
        caller=caller, door=configurations, plugin=_name(plugin_id), node=_name(node_id)
    )


class PluginNodesController(PluginControllerBase):
    path = "/v1/plugins/{plugin_id:str}/nodes/{node_id:str}"
    dependencies = {"caller": CALLER, "target": Provide(_target)}  # noqa: RUF012

    @reads(
        "/configuration", summary="One installed node's ordinary settings", responses=CHANGE_ERRORS
    )
    async def node_configuration(self, target: NodeTarget) -> NodeConfiguration:
        return await target.answer(target.door.configuration(target.plugin, target.node))

    @changes(
        "/configuration",
        summary="Validate, edit, enable or disable one node (revision and schema fenced)",
        scope=PLUGINS_MANAGE,
        body=NodeConfigurationMutation,
    )
    async def configure_node(self, target: NodeTarget) -> NodeConfigurationResult:
        mutation = await target.caller.body(NodeConfigurationMutation)
        return await target.answer(target.door.configure(target.plugin, target.node, mutation))

    @reads(
        "/credentials",
        summary="One node's credential metadata (never values)",
        responses=CHANGE_ERRORS,
    )
    async def node_credentials(self, target: NodeTarget) -> NodeCredentials:
        return await target.answer(target.door.credentials(target.plugin, target.node))

    @changes(
        "/credentials",
        summary="Replace or retire one write-only credential",
        scope=PLUGINS_MANAGE,
        body=NodeCredentialMutation,
    )
    async def configure_credential(self, target: NodeTarget) -> NodeCredentials:
        # NOTE: msgspec's refusals name the field and the rule, never the submitted
        # value, so a refusal cannot echo a credential.
        mutation = await target.caller.body(NodeCredentialMutation)
        work = target.door.configure_credential(target.plugin, target.node, mutation)
        return await target.answer(work)

    @reads(
        "/preflight",
        summary="Run the node's bounded, nonbillable setup checks",
        responses=CHANGE_ERRORS,
    )
    async def node_preflight(self, target: NodeTarget) -> NodePreflight:
        return await target.answer(target.door.preflight(target.plugin, target.node))

    @reads("/setup", summary="The node's public setup files", responses=CHANGE_ERRORS)
    async def node_setup(self, target: NodeTarget) -> NodeSetup:
        return await target.answer(target.door.setup(target.plugin, target.node))

    @reads(
        "/proposals",
        summary="A page of the node's retained proposals (read-only)",
        responses=CHANGE_ERRORS,
    )
    async def node_proposals(self, target: NodeTarget) -> ProposalPage:
        offset = _offset(target.caller.request.query_params.get("offset"))
        return await target.answer(target.door.proposals(target.plugin, target.node, offset))

    @reads(
        "/proposals/{proposal_id:str}",
        summary="A fresh review of one exact proposal (read-only)",
        responses=CHANGE_ERRORS,
    )
    async def node_proposal(self, target: NodeTarget, proposal_id: str) -> ProposalReview:
        digest = target.caller.request.query_params.get("proposal_digest") or ""
        proposal = _proposal_id(proposal_id)
        if not re.fullmatch(PROPOSAL_DIGEST_PATTERN, digest):
            fail(422, "proposal_digest is 64 lowercase hexadecimal characters", "invalid_id")
        reference = ProposalReference(
            plugin_id=target.plugin,
            node_id=target.node,
            proposal_id=proposal,
            proposal_digest=digest,
        )
        return await target.answer(target.door.proposal(reference))

    @reads(
        "/setup-actions",
        summary="The node's installed setup actions and retained operations",
        responses=CHANGE_ERRORS,
    )
    async def setup_actions(self, target: NodeTarget) -> NodeSetupActions:
        return await target.answer(target.setup.actions(target.plugin, target.node))

    @changes(
        "/setup-operations",
        summary="Start one durable, nonbillable setup action (fenced)",
        scope=PLUGINS_MANAGE,
        body=SetupStart,
        # NOTE: read past the 16 KiB intent bound, so an oversized intent gets the
        # spec's 422 (with no-store) from the door rather than a bare 413.
        request_max_body_size=2 * MAX_SETUP_INTENT_BYTES,
    )
    async def start_setup(self, target: NodeTarget) -> SetupOperation:
        start = await target.caller.body(SetupStart)
        actions, plugin, node = target.setup, target.plugin, target.node
        needs_approval = await target.answer(
            actions.needs_approval(plugin, node, start.action_id, None)
        )
        if needs_approval or start.expected_requires_approval:
            await target.caller.also_needs(PLUGINS_APPROVE)
        return await target.answer(actions.start(plugin, node, start))

    @reads(
        "/setup-operations/{operation_id:str}",
        summary="One retained setup operation's last durable progress",
        responses=CHANGE_ERRORS,
    )
    async def setup_operation(self, target: NodeTarget, operation_id: str) -> SetupOperation:
        checked = _setup_operation_id(operation_id)
        return await target.answer(target.setup.operation(target.plugin, target.node, checked))

    @changes(
        "/setup-operations/{operation_id:str}/resume",
        summary="Explicitly resume a retained setup operation's original intent",
        scope=PLUGINS_MANAGE,
    )
    async def resume_setup(self, target: NodeTarget, operation_id: str) -> SetupOperation:
        checked = _setup_operation_id(operation_id)
        await target.caller.no_body(RESUME_TAKES_NO_BODY, "invalid")
        actions, plugin, node = target.setup, target.plugin, target.node
        if await target.answer(actions.needs_approval(plugin, node, None, checked)):
            await target.caller.also_needs(PLUGINS_APPROVE)
        return await target.answer(actions.resume(plugin, node, checked))

    # -- owner proposal actions ------------------------------------------------------------

    @changes(
        "/proposals/{proposal_id:str}/approve",
        summary="Approve and execute one exactly reviewed proposal (plugins:approve)",
        scope=PLUGINS_APPROVE,
        body=ProposalApproval,
    )
    async def approve_proposal(self, target: NodeTarget, proposal_id: str) -> ProposalOperation:
        proposal = _proposal_id(proposal_id)
        approval = await target.caller.body(ProposalApproval)
        work = target.proposals.approve(
            target.plugin, target.node, proposal, approval, target.caller.actor
        )
        return await target.answer(work)

    @reads(
        "/proposal-operations/{operation_id:str}",
        summary="Observe one retained proposal action (never signs, executes or replays)",
        responses=CHANGE_ERRORS,
    )
    async def proposal_operation(self, target: NodeTarget, operation_id: str) -> ProposalOperation:
        checked = _setup_operation_id(operation_id)
        return await target.answer(target.proposals.operation(target.plugin, target.node, checked))

    @changes(
        "/proposal-operations/{operation_id:str}/resume",
        summary="Explicitly resume an interrupted approval (its original intent only)",
        scope=PLUGINS_APPROVE,
    )
    async def resume_proposal(self, target: NodeTarget, operation_id: str) -> ProposalOperation:
        checked = _setup_operation_id(operation_id)
        await target.caller.no_body(RESUME_TAKES_NO_BODY, "invalid")
        work = target.proposals.resume(target.plugin, target.node, checked, target.caller.actor)
        return await target.answer(work)
