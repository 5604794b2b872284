"""The cluster-wide keys of ``PUT /config`` (``logging``, ``hf_token``) on every node.

``PUT /config`` saves the change here, then orders ``SetClusterSettings``: State
carries the logging settings and, for a changed token, a fresh random revision only
(the token itself goes over the encrypted fabric, :mod:`skulk_daemon.fabric.
token_share`). Every node follows State: it saves the logging settings into its own
config and applies the level at once.
"""

from __future__ import annotations

import logging
import uuid

import msgspec

from skulk_core.config import LoggingConfig, LogLevel, SkulkConfig
from skulk_core.ids import new_command_id
from skulk_core.state.commands import SetClusterSettings
from skulk_core.state.state import ClusterSettings
from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.node.node import Node
from skulk_daemon.system.logs import set_level

log = logging.getLogger(__name__)

CLUSTER_WIDE_KEYS = ("hf_token", "logging")


def token_changed(before: SkulkConfig, after: SkulkConfig) -> bool:
    return bool((after.hf_token or "").strip()) and after.hf_token != before.hf_token


async def propagate(
    node: Node,
    cluster: ClusterAgent | None,
    before: SkulkConfig,
    after: SkulkConfig,
    present: set[str],
) -> None:
    """Order the cluster-wide part of a saved ``PUT /config`` change for every node.

    Nothing is ordered when the update left both keys alone (an omitted key keeps this
    node's value, which must not then overwrite the cluster's)."""
    new_token = token_changed(before, after)
    if "logging" not in present and not new_token:
        return
    previous = node.state.cluster_settings
    kept = None if previous is None else previous.hf_token_revision
    revision = uuid.uuid4().hex if new_token else kept
    settings = ClusterSettings(
        log_level=after.logging.level.value,
        event_log=after.logging.event_log,
        hf_token_revision=revision,
    )
    if new_token and revision is not None and cluster is not None:
        # NOTE: held before the revision is ordered, so the first beat that sees it in
        # State already has the token to send.
        cluster.token_share.put(str(after.hf_token), revision)
    await node.submit(SetClusterSettings(command_id=new_command_id(), settings=settings))


class ClusterSettingsFollower:
    """Applies State's cluster-wide settings to this node's config, once per change."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._seen: ClusterSettings | None = None

    def applied(self) -> None:
        settings = self._node.state.cluster_settings
        if settings is None or settings == self._seen:
            return
        self._seen = settings
        store = self._node.config_store
        wanted = LoggingConfig(level=LogLevel(settings.log_level), event_log=settings.event_log)
        if store.config.logging != wanted:
            store.save(msgspec.structs.replace(store.config, logging=wanted))
            log.info("applied the cluster's logging settings (level %s)", settings.log_level)
        set_level(settings.log_level)
