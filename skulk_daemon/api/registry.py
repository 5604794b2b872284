"""``GET /v1/registry/status``: where this node's signed catalog comes from and how
fresh it is (source URL, last refresh, snapshot id, verified age, last refusal).

Operator facts like the diagnostics bundle (it names local paths), so it takes the same
trusted-fabric authority: this machine, the LAN, or the operator gateway.
"""

from __future__ import annotations

from litestar import Controller, get

from skulk_daemon.api.authority import declare
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.registry.client import RegistryClient, RegistryStatus


class RegistryController(Controller):
    path = "/v1/registry"
    tags = ("Models",)
    opt = declare(Requirement.TRUSTED_FABRIC)

    @get(
        "/status",
        summary="The signed model registry: source, freshness and the last refusal",
        responses=errors(OPENAI),
    )
    async def status(self, registry: RegistryClient) -> RegistryStatus:
        return registry.status()
