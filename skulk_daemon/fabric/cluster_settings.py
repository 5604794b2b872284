"""The cluster-wide keys of ``PUT /config`` (``logging``, ``hf_token``,
``intelligent_fabric``) on every node.

``PUT /config`` saves the change here, then orders ``SetClusterSettings``: State
carries the logging settings, the intelligent-fabric mode and, for a changed token, a
fresh random revision only (the token itself goes over the encrypted fabric,
:mod:`skulk_daemon.fabric.token_share`). Every node follows State: it saves the logging
settings and the mode into its own config and applies the level at once. Until a mode
has been put, the master publishes its own (:func:`publish_fabric_mode`), so every
node's ``GET /v1/steward`` and the master's planner read one value.
"""

from __future__ import annotations

import logging
import uuid

import msgspec

from skulk_core.config import LoggingConfig, LogLevel, SkulkConfig
from skulk_core.ids import new_command_id
from skulk_core.state.commands import SetClusterSettings
from skulk_core.state.state import ClusterSettings
from skulk_core.steward.mode import mode_of, section_of
from skulk_daemon.fabric.cluster import ClusterAgent
from skulk_daemon.node.node import Node
from skulk_daemon.system.logs import set_level

log = logging.getLogger(__name__)

CLUSTER_WIDE_KEYS = ("hf_token", "logging", "intelligent_fabric")


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

    Nothing is ordered when the update left every such key alone, and a key the update
    omitted keeps the cluster's value (an omitted key keeps this node's value, which
    must not then overwrite the cluster's)."""
    new_token = token_changed(before, after)
    if "logging" not in present and "intelligent_fabric" not in present and not new_token:
        return
    previous = node.state.cluster_settings or ClusterSettings()
    revision = uuid.uuid4().hex if new_token else previous.hf_token_revision
    settings = msgspec.structs.replace(previous, hf_token_revision=revision)
    if "logging" in present:
        settings = msgspec.structs.replace(
            settings, log_level=after.logging.level.value, event_log=after.logging.event_log
        )
    if "intelligent_fabric" in present:
        settings = msgspec.structs.replace(
            settings, intelligent_fabric=mode_of(after.intelligent_fabric)
        )
    if new_token and revision is not None and cluster is not None:
        # NOTE: held before the revision is ordered, so the first beat that sees it in
        # State already has the token to send.
        cluster.token_share.put(str(after.hf_token), revision)
    await node.submit(SetClusterSettings(command_id=new_command_id(), settings=settings))


async def publish_fabric_mode(node: Node) -> None:
    """The master's own ``intelligent_fabric`` becomes the cluster's when State has none
    yet (a cluster whose mode was never put through ``PUT /config``)."""
    previous = node.state.cluster_settings or ClusterSettings()
    if not node.is_master or previous.intelligent_fabric is not None:
        return
    mode = mode_of(node.config.intelligent_fabric)
    settings = msgspec.structs.replace(previous, intelligent_fabric=mode)
    await node.submit(SetClusterSettings(command_id=new_command_id(), settings=settings))
    log.info("published this node's intelligent-fabric mode (enabled: %s)", mode.enabled)


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
        if settings.intelligent_fabric is not None:
            fabric = section_of(settings.intelligent_fabric)
            if store.config.intelligent_fabric != fabric:
                store.save(msgspec.structs.replace(store.config, intelligent_fabric=fabric))
                log.info(
                    "applied the cluster's intelligent-fabric mode (enabled: %s)", fabric.enabled
                )
        if settings.log_level is None:
            return
        wanted = LoggingConfig(
            level=LogLevel(settings.log_level),
            event_log=store.config.logging.event_log
            if settings.event_log is None
            else settings.event_log,
        )
        if store.config.logging != wanted:
            store.save(msgspec.structs.replace(store.config, logging=wanted))
            log.info("applied the cluster's logging settings (level %s)", settings.log_level)
        set_level(settings.log_level)
