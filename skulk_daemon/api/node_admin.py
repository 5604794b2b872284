"""Node management: restart in place, connectivity, the directory picker, the
field-telemetry preview. Each handler decodes its query, calls
:class:`~skulk_daemon.node_admin.service.NodeAdminService` once and returns its Struct.
"""

from __future__ import annotations

from typing import Annotated, Final

from litestar import Controller, MediaType, Response, get, post
from litestar.params import Parameter

from skulk_core.cluster.remote_access import RemoteAccess, TailscaleStatus
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.disclosure import remote_access_for
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import error_body
from skulk_daemon.node_admin.browse import DEFAULT_BROWSE_PATH, MAX_PATH_CHARS, DirectoryListing
from skulk_daemon.node_admin.restart import RestartPending
from skulk_daemon.node_admin.service import NodeAdminService, RestartAccepted, TelemetryPreview

PENDING_CODE: Final = "restart_already_pending"


def _pending(_: HttpRequest, exc: RestartPending) -> Response[dict[str, object]]:
    # The spec's body is {"status": "restart_already_pending"}; the error envelope rides
    # along so that clients reading either shape understand it.
    body = {"status": PENDING_CODE, **error_body(str(exc), "conflict_error", PENDING_CODE)}
    return Response(content=body, status_code=409, media_type=MediaType.JSON)


NodeIdQuery = Annotated[
    str | None,
    Parameter(description="Another cluster node's id: its answer, through its API."),
]


class NodeAdminController(Controller):
    tags = ("Node management",)
    opt = declare(Requirement.OPEN)
    exception_handlers = {RestartPending: _pending}  # noqa: RUF012

    @get(
        "/v1/telemetry/preview",
        summary="Field-telemetry consent and the exact batch that would be sent next",
        responses=errors(OPENAI),
    )
    async def telemetry_preview(self, admin: NodeAdminService) -> TelemetryPreview:
        return admin.telemetry_preview()

    @get(
        "/v1/connectivity/tailscale",
        summary="Whether tailscaled runs here (or on node_id), with its tailnet address",
        responses=errors(OPENAI, 404),
    )
    async def tailscale(
        self, admin: NodeAdminService, node_id: NodeIdQuery = None
    ) -> TailscaleStatus:
        return await admin.tailscale(node_id)

    @get(
        "/v1/connectivity/remote-access",
        summary="This node's LAN and tailnet URLs, the preferred one and the operator URL",
        responses=errors(OPENAI),
    )
    async def remote_access(self, admin: NodeAdminService, request: HttpRequest) -> RemoteAccess:
        return remote_access_for(request, await admin.remote_access())

    # NOTE: loopback only: the picker chooses model_store.models_dir, which only this
    # machine (or the operator gateway) may set, and a listing of /home or /tmp tells
    # another machine more than any LAN read needs.
    @get(
        "/filesystem/browse",
        opt=declare(Requirement.DIRECT_LOOPBACK),
        summary="Child directories of an allowed path, for configuration pickers",
        responses=errors(OPENAI, 400, 403),
    )
    async def browse(
        self,
        admin: NodeAdminService,
        path: Annotated[
            str,
            Parameter(
                description="Beneath /Volumes, /home, /mnt, /tmp or /opt (symlinks resolved).",
                max_length=MAX_PATH_CHARS,
            ),
        ] = DEFAULT_BROWSE_PATH,
    ) -> DirectoryListing:
        return await admin.browse(path)

    @post(
        "/admin/restart",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Restart a node in place (this one when no target is given)",
        description=(
            "Target by the stable `node_install_id` (from `GET /state` nodeIdentities) or, "
            "legacy, by the session `node_id`; both at once is 400, no live match 404, an "
            "ambiguous install id 409, as is a restart already pending "
            '(`{"status": "restart_already_pending"}`).'
        ),
        responses=errors(OPENAI, 400, 404, 409, 502, 503),
    )
    async def restart(
        self,
        admin: NodeAdminService,
        node_install_id: Annotated[
            str | None, Parameter(description="The stable id of the node to restart.")
        ] = None,
        node_id: Annotated[
            str | None, Parameter(description="Legacy: the session id of the node to restart.")
        ] = None,
    ) -> RestartAccepted:
        return await admin.restart(node_install_id=node_install_id, node_id=node_id)
