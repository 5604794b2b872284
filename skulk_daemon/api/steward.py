"""``GET /v1/steward`` and the steward's proposal audit and decisions."""

from __future__ import annotations

from litestar import Controller, get, post

from skulk_core.steward.lifecycle import StewardStatus
from skulk_daemon.api.authority import caller_of, declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Caller, Requirement
from skulk_daemon.steward.proposals import DecisionAccepted, DecisionRequest, ProposalList
from skulk_daemon.steward.service import StewardService

_ACTORS = {
    Caller.OPERATOR: "operator_gateway",
    Caller.TRUSTED_FABRIC: "trusted_fabric",
    Caller.LOOPBACK: "local_operator",
}


class StewardController(Controller):
    tags = ("Steward",)
    opt = declare(Requirement.OPEN)

    @get(
        "/v1/steward",
        summary="Steward (intelligent fabric) availability",
        responses=errors(OPENAI),
    )
    async def status(self, steward: StewardService) -> StewardStatus:
        return steward.status()

    @get(
        "/v1/steward/proposals",
        summary="The steward's action proposals, newest first",
        opt=declare(Requirement.TRUSTED_FABRIC),
        responses=errors(OPENAI, 403),
    )
    async def proposals(self, steward: StewardService) -> ProposalList:
        return steward.proposals.list()

    @post(
        "/v1/steward/proposals/{proposal_id:str}/decision",
        status_code=200,
        summary="Approve or reject one pending proposal (single use)",
        opt=declare(Requirement.TRUSTED_FABRIC),
        responses=errors(OPENAI, 400, 403, 404, 409),
    )
    async def decide(
        self, request: HttpRequest, steward: StewardService, proposal_id: str, data: DecisionRequest
    ) -> DecisionAccepted:
        actor = _ACTORS.get(caller_of(request), "operator")
        return await steward.proposals.decide(proposal_id, data.approved, actor)
