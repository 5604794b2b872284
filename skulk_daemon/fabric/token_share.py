"""The Hugging Face token's way to every node: over the encrypted fabric, never State.

``PUT /config`` on any node records a fresh random revision in State
(``ClusterSettings.hf_token_revision``) and hands the token here. Every node that
holds the token of the revision State names sends it, once per revision, to each live
peer it has not yet sent it to: the nodes up now at once, a node that joins later on
its first beat. A receiver saves a non-blank token to its own config (atomic, 0600);
a blank one never erases what a node has.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import msgspec

from skulk_core.cluster.fabric import ShareHfToken
from skulk_core.ids import NodeId
from skulk_daemon.fabric.framing import Outbox
from skulk_daemon.node.node import Node

log = logging.getLogger(__name__)


class TokenShare:
    def __init__(self, node: Node, outbox: Outbox) -> None:
        self._node = node
        self._outbox = outbox
        self._held: tuple[str, str] | None = None
        """(revision, token) this node holds, as put here or received."""
        self._sent: dict[NodeId, str] = {}
        """The revision each peer was last sent."""

    def put(self, token: str, revision: str) -> None:
        """The token ``PUT /config`` saved here under ``revision``."""
        self._held = (revision, token)

    def receive(self, origin: NodeId, body: ShareHfToken) -> None:
        if not body.token.strip():
            return
        self._held = (body.revision, body.token)
        self._sent[origin] = body.revision  # the sender has it
        config = self._node.config_store.config
        if config.hf_token == body.token:
            return
        self._node.config_store.save(msgspec.structs.replace(config, hf_token=body.token))
        log.info("saved the Hugging Face token shared by %s (revision %s)", origin, body.revision)

    def tick(self, live: Iterable[NodeId]) -> None:
        """Send the held token to each live peer that lacks State's current revision."""
        settings = self._node.state.cluster_settings
        held = self._held
        if settings is None or held is None or settings.hf_token_revision != held[0]:
            return
        revision, token = held
        for peer in live:
            if peer == self._node.node_id or self._sent.get(peer) == revision:
                continue
            if self._outbox.send(peer, ShareHfToken(token=token, revision=revision)):
                self._sent[peer] = revision
