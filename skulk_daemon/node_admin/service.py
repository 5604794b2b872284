"""``NodeAdminService``: what the node-management routes ask for, below the HTTP layer.

Restart targets resolve against live telemetry immediately before dispatch
(:func:`~skulk_core.cluster.restart_target.resolve_restart_target`). A remote target
is asked over its advertised API (the same fail-fast path the diagnostics fan-out
uses), with the install id it must still report.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Final, Literal

import msgspec

from skulk_core.cluster.remote_access import RemoteAccess, TailscaleStatus, remote_access
from skulk_core.cluster.restart_target import (
    RestartTarget,
    TargetRefusal,
    TargetRefused,
    resolve_restart_target,
)
from skulk_core.ids import NodeId, NodeInstallId
from skulk_daemon.errors import ApiError
from skulk_daemon.node.fanout import ask
from skulk_daemon.node.node import Node
from skulk_daemon.node_admin.browse import DirectoryListing, browse
from skulk_daemon.node_admin.restart import RestartLatch, RestartPending, RestartUnavailable
from skulk_daemon.node_admin.tailscale import TailscaleProbe
from skulk_daemon.system.netinfo import preferred_ipv4
from skulk_daemon.telemetry.field_queue import FieldQueue, FieldSample

FIELD_TELEMETRY_INGEST_URL: Final = "https://telemetry.skulk.invalid/v1/samples"
"""Where samples would go. This build has no ingest service: the local queue
(:mod:`skulk_daemon.telemetry.field_queue`) is shown, never sent (``.invalid``
cannot resolve)."""
REMOTE_RESTART_TIMEOUT_SECONDS: Final = 5.0

_STATUS_BY_REFUSAL: Final = {
    TargetRefusal.BOTH_FORMS: 400,
    TargetRefusal.NOT_FOUND: 404,
    TargetRefusal.AMBIGUOUS: 409,
}


class TelemetryPreview(msgspec.Struct, frozen=True, kw_only=True):
    enabled: bool
    consent: Literal["unasked", "granted"]
    pending: tuple[FieldSample, ...]
    dropped_since_start: int
    install_id: str
    ingest_url: str


class RestartAccepted(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    status: Literal["restarting", "restart_sent"]
    node_id: str
    node_install_id: str | None = None
    """Absent in the legacy answer to a ``node_id`` target."""


class NodeAdminService:
    def __init__(
        self,
        node: Node,
        *,
        restart: RestartLatch | None = None,
        tailscale: TailscaleProbe | None = None,
        field_queue: FieldQueue | None = None,
    ) -> None:
        self._node = node
        self.field_queue = field_queue or FieldQueue(node)
        self.restart_latch = restart or RestartLatch()
        self._tailscale = tailscale or TailscaleProbe()

    def telemetry_preview(self) -> TelemetryPreview:
        enabled = self._node.config.telemetry.enabled
        return TelemetryPreview(
            enabled=enabled,
            consent="granted" if enabled else "unasked",
            pending=self.field_queue.pending(),
            dropped_since_start=self.field_queue.dropped_since_start,
            install_id=self._node.identity.install_id if enabled else "",
            ingest_url=FIELD_TELEMETRY_INGEST_URL,
        )

    async def tailscale(self, node_id: str | None = None) -> TailscaleStatus:
        """This node's tailscale status, or a member's through its API (404 when no
        such member answers)."""
        if node_id is None or node_id == self._node.node_id:
            return await self._tailscale.status()
        if node_id not in self._node.view().telemetry:
            raise ApiError(404, f"no cluster node has id {node_id!r}", code="node_not_found")
        answer = await ask(self._node, NodeId(node_id), "GET", "/v1/connectivity/tailscale")
        if not answer.ok:
            raise ApiError(
                404,
                f"node {node_id} is not reachable: {answer.error or answer.status}",
                code="node_unreachable",
            )
        try:
            return msgspec.convert(answer.body, TailscaleStatus)
        except msgspec.ValidationError:
            raise ApiError(
                404, f"node {node_id} did not answer as a Skulk node", code="node_unreachable"
            ) from None

    async def remote_access(self) -> RemoteAccess:
        address = await asyncio.to_thread(preferred_ipv4)
        try:
            lan_ip: str | None = str(ipaddress.IPv4Address(address))
        except ValueError:  # no IPv4 interface: preferred_ipv4 fell back to the hostname
            lan_ip = None
        tailscale = await self._tailscale.status()
        return remote_access(lan_ip, self._node.settings.api_port, tailscale)

    async def browse(self, path: str) -> DirectoryListing:
        # A network mount can block on a directory read: never on the event loop.
        return await asyncio.to_thread(browse, path)

    def _live_install_ids(self) -> dict[NodeId, NodeInstallId]:
        return {
            node_id: reading.identity.node_install_id
            for node_id, reading in self._node.view().telemetry.items()
        }

    async def restart(self, *, node_install_id: str | None, node_id: str | None) -> RestartAccepted:
        """Restart the named node (this one when neither form is given)."""
        node = self._node
        target = resolve_restart_target(
            node.node_id,
            node.identity.install_id,
            self._live_install_ids(),
            node_install_id=node_install_id,
            node_id=node_id,
        )
        if isinstance(target, TargetRefused):
            raise ApiError(_STATUS_BY_REFUSAL[target.reason], target.message, code=target.reason)
        if target.local:
            try:
                self.restart_latch.request()
            except RestartUnavailable as exc:
                raise ApiError(503, str(exc), code="restart_unavailable") from None
            status: Literal["restarting", "restart_sent"] = "restarting"
        else:
            await self._restart_remote(target)
            status = "restart_sent"
        return RestartAccepted(
            status=status, node_id=target.node_id, node_install_id=target.install_id
        )

    async def _restart_remote(self, target: RestartTarget) -> None:
        params = None if target.install_id is None else {"node_install_id": target.install_id}
        answer = await ask(
            self._node,
            target.node_id,
            "POST",
            "/admin/restart",
            params=params,
            budget_seconds=REMOTE_RESTART_TIMEOUT_SECONDS,
        )
        if answer.ok:
            return
        if answer.status == 409 and _says_pending(answer.body):
            raise RestartPending(f"a restart of {target.node_id} is already pending")
        if answer.status is None:
            raise ApiError(
                503,
                f"node {target.node_id} is not reachable: {answer.error}",
                code="node_unreachable",
            )
        raise ApiError(
            502,
            f"node {target.node_id} refused the restart ({answer.status}): {_message(answer.body)}",
            code="restart_refused",
        )


def _says_pending(body: object) -> bool:
    return isinstance(body, dict) and body.get("status") == "restart_already_pending"


def _message(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:200]
    return "no message"
