"""The repair loop's pure half: which failed instances are placed again, and how.

An instance placed with an intent (``POST /place_instance``, or an exact instance's
stamped window) that fails for a reason another placement can avoid is placed
again with the same request: the same shape, the same window, the same
exclusions, plus the node that refused it when the node itself was the problem
(not enough memory, no model files). A pool whose donor went away is placed again
without excluding it: a donor whose node left is no longer a candidate anyway,
and one whose runner died may serve again. Attempts are bounded, so a model that
fails everywhere stops being retried and its failures stay visible.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

import msgspec

from skulk_core.ids import NodeId
from skulk_core.placement.planner import PlacementRequest
from skulk_core.placement.rpc_pool import MLX_RING_PEER_LOST, RPC_DONOR_LOST, RPC_PORT_IN_USE
from skulk_core.state.state import PlacementIntent

MAX_REPAIR_ATTEMPTS: Final = 3
"""Re-placements of one original request before the cluster gives up on it."""

PLACEMENT_REFUSED: Final = "placement_refused"
"""``errorCode`` of a node that refused its share at load time (``:<node id>``)."""
MODEL_NOT_INSTALLED: Final = "model_not_installed"
DOWNLOAD_FAILED: Final = "download_failed"

NODE_LOST: Final = "node_lost"
"""``errorCode`` of an instance whose node left the cluster (``:<node id>``)."""

# The node named by these failures is left out of the re-placement.
_BLAMES_THE_NODE: Final = (PLACEMENT_REFUSED, MODEL_NOT_INSTALLED, DOWNLOAD_FAILED)
# These failures are placed again without excluding anyone more.
_REPLACE_AS_BEFORE: Final = (
    RPC_DONOR_LOST,
    RPC_PORT_IN_USE,
    "rpc_donor_timeout",
    NODE_LOST,
    MLX_RING_PEER_LOST,
)


# A pool's or ring's peer went away: its node may be leaving the cluster.
_PEER_LOST: Final = (RPC_DONOR_LOST, MLX_RING_PEER_LOST)


def waits_for_peer(error_code: str) -> bool:
    """Whether a refused re-placement after this failure should wait a little: the
    failure names a pool or ring peer whose node may be on its way out of the cluster
    (membership drops a silent node only after some seconds)."""
    kind, node = _blamed(error_code, None)
    return kind in _PEER_LOST and node is not None


def after_peer_left(
    request: PlacementRequest, error_code: str, members: Collection[NodeId]
) -> PlacementRequest | None:
    """For a pool or ring whose named peer is no longer among ``members``: the same
    request on the nodes that remain (at least one node, the lost one excluded), as
    for ``node_lost``. None while the peer is still a member, or for other failures."""
    kind, node = _blamed(error_code, None)
    if kind not in _PEER_LOST or node is None or node in members:
        return None
    return msgspec.structs.replace(
        request, min_nodes=1, excluded_node_ids=request.excluded_node_ids | {node}
    )


def intent_of(
    request: PlacementRequest,
    attempt: int = 0,
    *,
    on_demand: bool = False,
    keep_alive_seconds: float | None = None,
) -> PlacementIntent:
    """The intent recorded for ``request`` (``node_ids`` steer one launch only);
    ``on_demand`` and ``keep_alive_seconds`` mark a placement a request made (see
    :mod:`skulk_core.placement.keep_alive`)."""
    return PlacementIntent(
        sharding=request.sharding,
        instance_meta=request.instance_meta,
        min_nodes=request.min_nodes,
        excluded_node_ids=tuple(sorted(request.excluded_node_ids)),
        context_tokens=request.context_tokens,
        repair_attempt=attempt,
        on_demand=on_demand,
        keep_alive_seconds=keep_alive_seconds if on_demand else None,
    )


def _blamed(error_code: str, reporter: NodeId | None) -> tuple[str, NodeId | None]:
    """The failure's kind and the node it names (``kind:<node id>``), else the node
    that reported it."""
    kind, _, named = error_code.partition(":")
    if named and kind != RPC_PORT_IN_USE:  # that one names host:port, not a node
        return kind, NodeId(named)
    return kind, reporter


def repair_request(
    intent: PlacementIntent, error_code: str, reporter: NodeId | None
) -> PlacementRequest | None:
    """The request that places a failed instance again, or None if it should stay
    failed (a kind of failure another placement cannot avoid, or attempts spent)."""
    if intent.repair_attempt >= MAX_REPAIR_ATTEMPTS:
        return None
    kind, node = _blamed(error_code, reporter)
    excluded = set(intent.excluded_node_ids)
    if kind in _BLAMES_THE_NODE:
        if node is not None:
            excluded.add(node)
    elif kind not in _REPLACE_AS_BEFORE:
        return None
    # NOTE: a node that left takes its share with it: the instance goes back on the
    # nodes that remain, however few (an MLX ring or RPC pool survives its API node).
    min_nodes = 1 if kind == NODE_LOST else intent.min_nodes
    return PlacementRequest(
        sharding=intent.sharding,
        instance_meta=intent.instance_meta,
        min_nodes=min_nodes,
        excluded_node_ids=frozenset(excluded),
        context_tokens=intent.context_tokens,
    )
