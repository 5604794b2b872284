"""The managed-plugin release routes: an installation's release source, inspection and
installation, and the host's signed catalog.

As in ``plugins.py``: one typed manager request per handler through
:class:`~skulk_daemon.api.plugin_manager.ManagerCall`; reads need ``plugins:read``,
downloads ``plugins:manage``; the release source, the catalog source and catalog
installs are direct-owner only (a presented credential is told to drop it).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from skulk_core.plugins.answers import CatalogInstalled, CatalogReview, ReleaseReview, SourceStatus
from skulk_daemon.api.plugin_authority import CHANGE_ERRORS, changes, reads
from skulk_daemon.api.plugin_manager import ManagerCall, operation_id_of, plugin_id_of
from skulk_daemon.api.plugins import INSTALLATION, PluginControllerBase
from skulk_daemon.operator.plugin_grants import PLUGINS_MANAGE
from skulk_host.plugin_manager.protocol import (
    CatalogStatusRequest,
    CatalogUpdate,
    ConfigureCatalogRequest,
    ConfigureSourceRequest,
    InspectReleaseRequest,
    InstallFromCatalogRequest,
    InstallOperation,
    InstallReleaseRequest,
    InstallRequest,
    InstallStatus,
    InstallStatusRequest,
    PluginId,
    ReadCatalogRequest,
    RecoverInstallRequest,
    SourceStatusRequest,
    SourceUpdate,
)


class RecoverInstallBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    expected_source_revision: Annotated[int, msgspec.Meta(ge=0)]


class CatalogInstallBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    catalog_sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
    bundle_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    sequence: Annotated[int, msgspec.Meta(ge=1)]
    runtime_platform: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    plugin_id: PluginId | None = None


class PluginReleasesController(PluginControllerBase):
    path = "/v1/plugins"

    @reads(f"{INSTALLATION}/source", summary="Release source readiness")
    async def source(self, manager: ManagerCall, plugin_id: str) -> SourceStatus:
        return await manager.ask(
            SourceStatusRequest(plugin_id=plugin_id_of(plugin_id)), SourceStatus
        )

    @changes(
        f"{INSTALLATION}/source",
        summary="Configure the release source and publisher trust (direct owner only)",
        scope=None,
        body=SourceUpdate,
    )
    async def configure_source(self, manager: ManagerCall, plugin_id: str) -> SourceStatus:
        checked = plugin_id_of(plugin_id)
        update = await manager.caller.body(SourceUpdate)
        return await manager.ask(
            ConfigureSourceRequest(plugin_id=checked, request=update), SourceStatus
        )

    @reads(
        f"{INSTALLATION}/release",
        summary="Fetch and verify the release metadata",
        responses=CHANGE_ERRORS,
    )
    async def release(self, manager: ManagerCall, plugin_id: str) -> ReleaseReview:
        request = InspectReleaseRequest(plugin_id=plugin_id_of(plugin_id))
        return await manager.ask(request, ReleaseReview)

    @changes(
        f"{INSTALLATION}/install",
        summary="Download and stage the reviewed release",
        scope=PLUGINS_MANAGE,
        body=InstallRequest,
    )
    async def install(self, manager: ManagerCall, plugin_id: str) -> InstallOperation:
        checked = plugin_id_of(plugin_id)
        body = await manager.caller.body(InstallRequest)
        return await manager.ask(
            InstallReleaseRequest(plugin_id=checked, request=body), InstallOperation
        )

    @reads(f"{INSTALLATION}/install", summary="The retained installation operation")
    async def install_status(self, manager: ManagerCall, plugin_id: str) -> InstallStatus:
        request = InstallStatusRequest(plugin_id=plugin_id_of(plugin_id))
        return await manager.ask(request, InstallStatus)

    @changes(
        f"{INSTALLATION}/install/{{operation_id:str}}/recover",
        summary="Explicitly retry an interrupted download",
        scope=PLUGINS_MANAGE,
        body=RecoverInstallBody,
    )
    async def recover_install(
        self, manager: ManagerCall, plugin_id: str, operation_id: str
    ) -> InstallOperation:
        checked, operation = plugin_id_of(plugin_id), operation_id_of(operation_id)
        body = await manager.caller.body(RecoverInstallBody)
        request = RecoverInstallRequest(
            plugin_id=checked,
            operation_id=operation,
            expected_source_revision=body.expected_source_revision,
        )
        return await manager.ask(request, InstallOperation)

    @reads(
        "/managed/catalog", summary="Read and verify the signed catalog", responses=CHANGE_ERRORS
    )
    async def catalog(self, manager: ManagerCall) -> CatalogReview:
        return await manager.ask(ReadCatalogRequest(), CatalogReview)

    @reads("/managed/catalog/source", summary="Catalog source readiness")
    async def catalog_source(self, manager: ManagerCall) -> SourceStatus:
        return await manager.ask(CatalogStatusRequest(), SourceStatus)

    @changes(
        "/managed/catalog/source",
        summary="Configure the catalog address and discovery trust (direct owner only)",
        scope=None,
        body=CatalogUpdate,
    )
    async def configure_catalog(self, manager: ManagerCall) -> SourceStatus:
        update = await manager.caller.body(CatalogUpdate)
        return await manager.ask(ConfigureCatalogRequest(request=update), SourceStatus)

    @changes(
        "/managed/catalog/install",
        summary="Bind an installation to a reviewed catalog listing (direct owner only)",
        scope=None,
        body=CatalogInstallBody,
    )
    async def catalog_install(self, manager: ManagerCall) -> CatalogInstalled:
        body = await manager.caller.body(CatalogInstallBody)
        request = InstallFromCatalogRequest(**msgspec.structs.asdict(body))
        return await manager.ask(request, CatalogInstalled)
