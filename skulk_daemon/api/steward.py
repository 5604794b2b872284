"""``GET /v1/steward`` and the steward's proposal audit and decisions."""

from __future__ import annotations

from litestar import Controller, get

from skulk_core.steward.lifecycle import StewardStatus
from skulk_daemon.api.authority import declare
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.steward.service import StewardService


class StewardController(Controller):
    tags = ("Steward",)
    opt = declare(Requirement.OPEN)

    @get(
        "/v1/steward", summary="Steward (intelligent fabric) availability", responses=errors(OPENAI)
    )
    async def status(self, steward: StewardService) -> StewardStatus:
        return steward.status()
