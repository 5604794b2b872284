"""The managed-plugin routes: the inventory, installations and their lifecycle
operations (``plugin_releases.py`` has release sources, installs and the catalog).

Every handler is one typed manager request through :class:`~skulk_daemon.api.
plugin_manager.ManagerCall`, which maps refusals to statuses; authority is the plugin
routes' rule (``plugin_authority.py``): reads need ``plugins:read``, changes
``plugins:manage``, or direct owner access. Statuses: 404 unknown installation or
operation, 409 a fence or refused intent, 422 malformed body or id, 429 saturated, 503
no setup or no manager, 504 the manager's deadline. Every response says
``Cache-Control: no-store``.
"""

from __future__ import annotations

from typing import Final

import msgspec
from litestar import Controller, delete
from litestar.datastructures import ResponseHeader

from skulk_core.plugins.answers import (
    Installation,
    InventoryEntry,
    ManagedInstallations,
    ManagerListing,
    PluginInventory,
    Purged,
    selected_node,
)
from skulk_core.plugins.errors import PluginRefusal
from skulk_core.plugins.node_configuration import MAX_PROVIDERS
from skulk_daemon.api.authority import declare
from skulk_daemon.api.errors import NO_STORE_EXCEPTION_HANDLERS
from skulk_daemon.api.plugin_authority import (
    CALLER,
    CHANGE_ERRORS,
    MAX_PLUGIN_BODY_BYTES,
    changes,
    needs,
    reads,
)
from skulk_daemon.api.plugin_manager import MANAGER, ManagerCall, operation_id_of, plugin_id_of
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import NO_STORE_HEADERS
from skulk_daemon.operator.plugin_grants import PLUGINS_MANAGE
from skulk_daemon.plugins.access import ManagerRefused
from skulk_daemon.plugins.configuration import NodeConfigurations
from skulk_host.plugin_manager.protocol import (
    GetRequest,
    LifecycleOperation,
    LifecycleRequest,
    ListRequest,
    OperationRequest,
    PluginId,
    PurgeRequest,
    RecoverRequest,
    RegisterRequest,
    SubmitRequest,
)

INSTALLATION: Final = "/managed/installations/{plugin_id:str}"
OPERATION: Final = f"{INSTALLATION}/operations/{{operation_id:str}}"


class RegisterBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    plugin_id: PluginId


class PluginControllerBase(Controller):
    """What every plugin controller shares: the boundary, the bound, no-store."""

    tags = ("Plugins",)
    # NOTE: the guard admits only loopback without proxy headers, or the operator
    # listener; the ``caller`` dependency then applies the owner / bearer-scope rule.
    opt = declare(Requirement.DIRECT_LOOPBACK)
    request_max_body_size = MAX_PLUGIN_BODY_BYTES
    response_headers = tuple(ResponseHeader(name=k, value=v) for k, v in NO_STORE_HEADERS.items())
    exception_handlers = NO_STORE_EXCEPTION_HANDLERS
    dependencies = {"caller": CALLER, "manager": MANAGER}  # noqa: RUF012 (Litestar's layer)


class PluginsController(PluginControllerBase):
    path = "/v1/plugins"

    @reads("/", summary="Installed plugins and their nodes")
    async def inventory(
        self, manager: ManagerCall, configurations: NodeConfigurations | None
    ) -> PluginInventory:
        try:
            listed = await manager.access.ask(ListRequest(), ManagerListing)
            installations, available = listed.installations, True
        except (PluginRefusal, ManagerRefused):
            installations, available = manager.access.last_inventory, False
        # In-process providers, then each installation: as its owner describes itself
        # over its socket, or (not described yet) as the manager lists it.
        entries = [] if configurations is None else await configurations.inventory()
        for installation in installations:
            described = None
            if configurations is not None:
                described = configurations.managed_entry(installation.plugin_id)
            node = selected_node(installation)
            listed_only = InventoryEntry(
                plugin_id=installation.plugin_id,
                available=available,
                nodes=[] if node is None else [node],
            )
            entries.append(described or listed_only)
        return PluginInventory(plugins=entries[:MAX_PROVIDERS])

    @reads("/managed", summary="Managed installations")
    async def managed(self, manager: ManagerCall) -> ManagedInstallations:
        listed = await manager.ask(ListRequest(), ManagerListing)
        # NOTE: reload_runtime tells a manager from before that request apart; the
        # manager's build and runtime fields stay host-local.
        return ManagedInstallations(
            installations=listed.installations, reload_runtime=listed.reload_runtime
        )

    @changes(
        "/managed/installations",
        summary="Register an empty managed installation",
        scope=PLUGINS_MANAGE,
        body=RegisterBody,
    )
    async def register(self, manager: ManagerCall) -> Installation:
        body = await manager.caller.body(RegisterBody)
        return await manager.ask(RegisterRequest(plugin_id=body.plugin_id), Installation)

    @reads(INSTALLATION, summary="One installation")
    async def installation(self, manager: ManagerCall, plugin_id: str) -> Installation:
        return await manager.ask(GetRequest(plugin_id=plugin_id_of(plugin_id)), Installation)

    @delete(
        INSTALLATION,
        status_code=200,
        summary="Purge an uninstalled installation",
        responses=CHANGE_ERRORS,
        opt=needs(PLUGINS_MANAGE),
    )
    async def purge(self, manager: ManagerCall, plugin_id: str) -> Purged:
        await manager.caller.no_body()
        return await manager.ask(PurgeRequest(plugin_id=plugin_id_of(plugin_id)), Purged)

    @changes(
        f"{INSTALLATION}/operations",
        summary="Submit a lifecycle operation (activate, select, disable, uninstall)",
        scope=PLUGINS_MANAGE,
        body=LifecycleRequest,
    )
    async def submit(self, manager: ManagerCall, plugin_id: str) -> LifecycleOperation:
        checked = plugin_id_of(plugin_id)
        body = await manager.caller.body(LifecycleRequest)
        return await manager.ask(SubmitRequest(plugin_id=checked, request=body), LifecycleOperation)

    @reads(OPERATION, summary="A retained lifecycle operation")
    async def operation(
        self, manager: ManagerCall, plugin_id: str, operation_id: str
    ) -> LifecycleOperation:
        request = OperationRequest(
            plugin_id=plugin_id_of(plugin_id), operation_id=operation_id_of(operation_id)
        )
        return await manager.ask(request, LifecycleOperation)

    @changes(
        f"{OPERATION}/recover",
        summary="Explicitly resume a retained lifecycle operation",
        scope=PLUGINS_MANAGE,
    )
    async def recover(
        self, manager: ManagerCall, plugin_id: str, operation_id: str
    ) -> LifecycleOperation:
        await manager.caller.no_body()
        request = RecoverRequest(
            plugin_id=plugin_id_of(plugin_id), operation_id=operation_id_of(operation_id)
        )
        return await manager.ask(request, LifecycleOperation)
