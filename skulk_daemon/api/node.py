"""Node identity and the node-local onboarding marker."""

from __future__ import annotations

import socket

import msgspec
from litestar import Controller, MediaType, Response, get, post

from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.disclosure import identity_address_for
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.node.node import Node
from skulk_daemon.system.netinfo import preferred_ipv4
from skulk_host.fsutil import atomic_write


class NodeIdentityResponse(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node_id: str
    hostname: str
    ip_address: str


class OnboardingStatus(msgspec.Struct, frozen=True, kw_only=True):
    completed: bool


class NodeController(Controller):
    tags = ("Node",)
    opt = declare(Requirement.OPEN)

    @get(
        "/node_id",
        summary="This node's id, as a JSON string",
        media_type=MediaType.JSON,
        responses=errors(OPENAI),
    )
    async def node_id(self, node: Node) -> Response[bytes]:
        # Litestar sends a bare str as is; clients parse this route as a JSON string.
        return Response(content=msgspec.json.encode(node.node_id), media_type=MediaType.JSON)

    @get(
        "/node/identity",
        summary="This node's id, hostname and preferred address",
        responses=errors(OPENAI),
    )
    async def identity(self, node: Node, request: HttpRequest) -> NodeIdentityResponse:
        hostname = socket.gethostname()
        address = identity_address_for(request, preferred_ipv4(), hostname)
        return NodeIdentityResponse(node_id=node.node_id, hostname=hostname, ip_address=address)

    @get(
        "/onboarding",
        summary="Whether the dashboard onboarding flow was completed here",
        responses=errors(OPENAI),
    )
    async def onboarding(self, node: Node) -> OnboardingStatus:
        return OnboardingStatus(completed=node.settings.onboarding_marker_path.exists())

    @post(
        "/onboarding",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Mark onboarding complete on this node",
        responses=errors(OPENAI),
    )
    async def complete_onboarding(self, node: Node) -> OnboardingStatus:
        atomic_write(node.settings.onboarding_marker_path, b"completed\n")
        return OnboardingStatus(completed=True)
