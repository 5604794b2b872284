"""The managed-plugin release routes: an installation's release source, inspection and
installation, and the host's signed catalog.

As in ``plugins.py``: one typed manager request per handler through
:class:`~skulk_daemon.api.plugin_manager.ManagerCall`; reads need ``plugins:read``,
downloads ``plugins:manage``; the release source, the catalog source and catalog
installs are direct-owner only (a presented credential is told to drop it).
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec
from litestar import get, post

from skulk_core.plugins.answers import CatalogInstalled, CatalogReview, ReleaseReview, SourceStatus
from skulk_daemon.api.openapi import documented
from skulk_daemon.api.plugin_authority import CHANGE_ERRORS, READ_ERRORS, needs
from skulk_daemon.api.plugin_manager import ManagerCall, operation_id_of, plugin_id_of
from skulk_daemon.api.plugins import INSTALLATION, MANAGE, READ, PluginControllerBase
from skulk_daemon.plugins.manager.protocol import (
    CatalogStatusRequest,
    CatalogUpdate,
    ConfigureCatalogRequest,
    ConfigureSourceRequest,
    InspectReleaseRequest,
    InstallFromCatalogRequest,
    InstallOperation,
    InstallReleaseRequest,
    InstallRequest,
    InstallStatusRequest,
    PluginId,
    ReadCatalogRequest,
    RecoverInstallRequest,
    SourceStatusRequest,
    SourceUpdate,
)

DIRECT_OWNER: Final = needs(None)


class RecoverInstallBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    expected_source_revision: Annotated[int, msgspec.Meta(ge=0)]


class CatalogInstallBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    catalog_sha256: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
    bundle_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    sequence: Annotated[int, msgspec.Meta(ge=1)]
    runtime_platform: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    plugin_id: PluginId | None = None


class InstallStatus(msgspec.Struct, frozen=True, kw_only=True):
    """``install_status``'s result: the installation's latest install operation.

    NOTE: the manager protocol declares no Struct for this result yet; it belongs
    there (``manager/protocol.py``) once that module's move settles."""

    operation: InstallOperation | None


class PluginReleasesController(PluginControllerBase):
    path = "/v1/plugins"

    @get(
        f"{INSTALLATION}/source",
        summary="Release source readiness",
        responses=READ_ERRORS,
        opt=READ,
    )
    async def source(self, manager: ManagerCall, plugin_id: str) -> SourceStatus:
        return await manager.ask(
            SourceStatusRequest(plugin_id=plugin_id_of(plugin_id)), SourceStatus
        )

    @post(
        f"{INSTALLATION}/source",
        status_code=200,
        summary="Configure the release source and publisher trust (direct owner only)",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=SourceUpdate),
        opt=DIRECT_OWNER,
    )
    async def configure_source(self, manager: ManagerCall, plugin_id: str) -> SourceStatus:
        checked = plugin_id_of(plugin_id)
        update = await manager.caller.body(SourceUpdate)
        return await manager.ask(
            ConfigureSourceRequest(plugin_id=checked, request=update), SourceStatus
        )

    @get(
        f"{INSTALLATION}/release",
        summary="Fetch and verify the release metadata",
        responses=CHANGE_ERRORS,
        opt=READ,
    )
    async def release(self, manager: ManagerCall, plugin_id: str) -> ReleaseReview:
        request = InspectReleaseRequest(plugin_id=plugin_id_of(plugin_id))
        return await manager.ask(request, ReleaseReview)

    @post(
        f"{INSTALLATION}/install",
        status_code=200,
        summary="Download and stage the reviewed release",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=InstallRequest),
        opt=MANAGE,
    )
    async def install(self, manager: ManagerCall, plugin_id: str) -> InstallOperation:
        checked = plugin_id_of(plugin_id)
        body = await manager.caller.body(InstallRequest)
        return await manager.ask(
            InstallReleaseRequest(plugin_id=checked, request=body), InstallOperation
        )

    @get(
        f"{INSTALLATION}/install",
        summary="The retained installation operation",
        responses=READ_ERRORS,
        opt=READ,
    )
    async def install_status(self, manager: ManagerCall, plugin_id: str) -> InstallStatus:
        request = InstallStatusRequest(plugin_id=plugin_id_of(plugin_id))
        return await manager.ask(request, InstallStatus)

    @post(
        f"{INSTALLATION}/install/{{operation_id:str}}/recover",
        status_code=200,
        summary="Explicitly retry an interrupted download",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=RecoverInstallBody),
        opt=MANAGE,
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

    @get(
        "/managed/catalog",
        summary="Read and verify the signed catalog",
        responses=CHANGE_ERRORS,
        opt=READ,
    )
    async def catalog(self, manager: ManagerCall) -> CatalogReview:
        return await manager.ask(ReadCatalogRequest(), CatalogReview)

    @get(
        "/managed/catalog/source",
        summary="Catalog source readiness",
        responses=READ_ERRORS,
        opt=READ,
    )
    async def catalog_source(self, manager: ManagerCall) -> SourceStatus:
        return await manager.ask(CatalogStatusRequest(), SourceStatus)

    @post(
        "/managed/catalog/source",
        status_code=200,
        summary="Configure the catalog address and discovery trust (direct owner only)",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=CatalogUpdate),
        opt=DIRECT_OWNER,
    )
    async def configure_catalog(self, manager: ManagerCall) -> SourceStatus:
        update = await manager.caller.body(CatalogUpdate)
        return await manager.ask(ConfigureCatalogRequest(request=update), SourceStatus)

    @post(
        "/managed/catalog/install",
        status_code=200,
        summary="Bind an installation to a reviewed catalog listing (direct owner only)",
        responses=CHANGE_ERRORS,
        operation_class=documented(body=CatalogInstallBody),
        opt=DIRECT_OWNER,
    )
    async def catalog_install(self, manager: ManagerCall) -> CatalogInstalled:
        body = await manager.caller.body(CatalogInstallBody)
        request = InstallFromCatalogRequest(**msgspec.structs.asdict(body))
        return await manager.ask(request, CatalogInstalled)
