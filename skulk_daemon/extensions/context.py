"""``ExtensionContext``: what every extension hook is handed.

The context is the extension's window on its node and cluster: the node's identity
and Skulk version, in-process embeddings (:meth:`ExtensionContext.embed_texts`), an
immutable snapshot of the telemetry plane (:meth:`ExtensionContext.read_cluster`),
the capability tags and capability-node summaries this node gossips, and typed
capability calls and streams to any node (delegated to the capability fabric).

Nothing here raises into an extension for an ordinary failure: embeddings answer
``None``, capability calls answer a typed error, publishing past a bound is refused
with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.extensions.capabilities import (
    DEFAULT_TIMEOUT_SECONDS,
    CapabilityDescriptor,
    CapabilityResult,
    CapabilityStreamSession,
    JsonObject,
)
from skulk_core.extensions.capability_nodes import CapabilityNodeSummary
from skulk_core.ids import NodeId
from skulk_core.state.state import State
from skulk_core.version import SKULK_VERSION

if TYPE_CHECKING:
    from skulk_daemon.capabilities.service import CapabilityService
    from skulk_daemon.embeddings.service import EmbeddingService
    from skulk_daemon.node.node import Node

log = logging.getLogger("skulk.extensions")


EmbedTexts = Callable[[Sequence[str], str | None], Awaitable[list[list[float]] | None]]
"""In-process embeddings: ``(texts, model or None) -> vectors | None``."""


@dataclass(frozen=True, slots=True)
class ClusterNodeView:
    """One node as this node's telemetry plane sees it; immutable.

    Every field beyond ``node_id`` may be ``None`` (or empty) when that reading has not
    arrived yet: telemetry is last-write-wins and partial.
    """

    node_id: str
    friendly_name: str | None = None
    backends: tuple[str, ...] = ()
    participation: str | None = None
    skulk_version: str | None = None
    accelerator_vendor: str | None = None
    ram_total_bytes: int | None = None
    last_telemetry: datetime | None = None
    """The freshest liveness signal: a telemetry reading or any event from the node."""
    capabilities: tuple[str, ...] = ()
    """The capability tags the node advertises (sorted)."""


def node_view(node_id: NodeId, reading: NodeTelemetry | None, state: State) -> ClusterNodeView:
    """The view of one node from its reading (if any) and State's last-seen time."""
    seen = [t for t in (state.last_seen.get(node_id),) if t is not None]
    if reading is None:
        return ClusterNodeView(node_id=str(node_id), last_telemetry=max(seen, default=None))
    accelerator = reading.system.accelerator
    return ClusterNodeView(
        node_id=str(node_id),
        friendly_name=reading.identity.friendly_name,
        backends=tuple(reading.resources.backends),
        participation=str(reading.resources.participation.value),
        skulk_version=reading.identity.skulk_version,
        accelerator_vendor=accelerator.vendor if accelerator is not None else None,
        ram_total_bytes=reading.memory.ram_total.in_bytes,
        last_telemetry=max([reading.observed_at, *seen]),
        capabilities=tuple(sorted(set(reading.capabilities))),
    )


def cluster_views(
    state: State, telemetry: Mapping[NodeId, NodeTelemetry]
) -> tuple[ClusterNodeView, ...]:
    """One view per node in the topology or the telemetry, ordered by node id."""
    nodes = sorted({*state.topology.nodes, *telemetry})
    return tuple(node_view(node_id, telemetry.get(node_id), state) for node_id in nodes)


def in_process_embedder(embeddings: EmbeddingService) -> EmbedTexts:
    """``embed_texts`` over the same admission and runner path as ``POST /v1/embeddings``."""
    return embeddings.embed_texts


class ExtensionContext:
    """What each hook receives: identity, embeddings, the cluster, capabilities.

    One context per node, shared by every loaded extension. Safe to call from any
    hook on the serving event loop; nothing here does blocking I/O.
    """

    def __init__(
        self,
        node: Node,
        fabric: CapabilityService | None = None,
        embed: EmbedTexts | None = None,
    ) -> None:
        self._node = node
        self._fabric = fabric
        self._embed = embed

    # -- identity ------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        """This node's id (``12D3KooW...``)."""
        return str(self._node.node_id)

    @property
    def skulk_version(self) -> str:
        """The running Skulk version."""
        return SKULK_VERSION

    # -- embeddings ------------------------------------------------------------------

    async def embed_texts(
        self, texts: Sequence[str], model: str | None = None
    ) -> list[list[float]] | None:
        """Embed ``texts`` in process, like ``POST /v1/embeddings``.

        ``model`` defaults to the first embedding model with a placed instance. Returns
        one vector per text, or ``None`` when no embedding instance is available (or
        the request cannot be served); never raises for that.
        """
        if isinstance(texts, str):
            texts = [texts]
        if not texts:
            return []
        if self._embed is None:
            return None
        try:
            return await self._embed(list(texts), model)
        except Exception as exc:
            log.warning("embed_texts answered None: %s", getattr(exc, "message", exc))
            return None

    # -- the telemetry plane ---------------------------------------------------------

    def read_cluster(self) -> tuple[ClusterNodeView, ...]:
        """An immutable snapshot: one :class:`ClusterNodeView` per node seen here."""
        view = self._node.view()
        return cluster_views(view.state, view.telemetry)

    def advertise_capability(self, tag: str) -> None:
        """Gossip ``tag`` as a capability this node offers (additive, idempotent)."""
        if not isinstance(tag, str) or not tag:
            raise ValueError("a capability tag is a non-empty string")
        if self._fabric is None:
            log.warning("advertise_capability(%r): no capability fabric on this node", tag)
            return
        self._fabric.advertise(tag)

    def withdraw_capability(self, tag: str) -> None:
        """Stop gossiping ``tag``."""
        if self._fabric is not None:
            self._fabric.withdraw(tag)

    def publish_capability_node(self, summary: CapabilityNodeSummary) -> bool:
        """Publish (or replace, same ``plugin_id``/``node_id``) a capability-node summary.

        The summary's own bounds and URL checks ran when it was constructed (a URL with
        credentials cannot be built). A host publishes at most
        16 (``MAX_NODES_PER_HOST``); a new one past that is refused with a warning and
        this returns ``False``.
        """
        if not isinstance(summary, CapabilityNodeSummary):
            raise TypeError("publish_capability_node takes a CapabilityNodeSummary")
        if self._fabric is None:
            log.warning("capability node %s/%s: no capability fabric here", *summary.key)
            return False
        return self._fabric.publish_node(summary)

    def withdraw_capability_node(self, plugin_id: str, node_id: str) -> None:
        """Remove a published summary (a no-op if it was never published)."""
        if self._fabric is not None:
            self._fabric.withdraw_node(plugin_id, node_id)

    # -- capability calls --------------------------------------------------------------

    def _fabric_or_raise(self) -> CapabilityService:
        if self._fabric is None:
            raise RuntimeError("this node has no capability fabric")
        return self._fabric

    async def describe_node(self, node_id: str) -> list[CapabilityDescriptor]:
        """The full descriptors a node serves (what ``GET /v1/capabilities`` lists)."""
        return await self._fabric_or_raise().describe_node(node_id)

    async def call_capability(  # noqa: PLR0917 (the spec's positional signature)
        self,
        node_id: str,
        capability_id: str,
        version: str,
        revision: str,
        payload: JsonObject,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,  # noqa: ASYNC109 (the call's deadline)
    ) -> CapabilityResult:
        """A unary call pinned to ``id@version`` and the descriptor revision; typed result."""
        return await self._fabric_or_raise().call(
            node_id, capability_id, version, revision, payload, timeout=timeout
        )

    async def stream_capability(  # noqa: PLR0917 (the spec's positional signature)
        self,
        node_id: str,
        capability_id: str,
        version: str,
        revision: str,
        payload: JsonObject,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,  # noqa: ASYNC109 (the call's deadline)
    ) -> CapabilityStreamSession:
        """Open a streaming call; check ``session.open_result`` before reading frames."""
        return await self._fabric_or_raise().stream(
            node_id, capability_id, version, revision, payload, timeout=timeout
        )
