"""Which node serves a speech provider call for a model: this node first, else a peer.

The realtime edge (``stt.realtime@1.0.0`` per utterance, ``tts@1.0.0`` for the
response participant) and the ``stt.realtime`` provider's relay pick the node the
same way. A node qualifies when it is the serving node of an instance of the model
whose runners are all ready (:class:`RunnerReady` or :class:`RunnerRunning`; for
realtime, a single-host instance). This node wins when it qualifies; otherwise the
first qualifying peer (by node id) that advertises the provider's telemetry tag and
is heard from over the fabric, since remote input needs the node-addressed data
plane. ``None`` when no node qualifies: the caller has no capacity anywhere.
"""

from __future__ import annotations

from typing import Protocol

from skulk_core.ids import ModelId, NodeId
from skulk_core.state.shards import RunnerReady, RunnerRunning, serving_node
from skulk_daemon.node.node import Node


class Reachability(Protocol):
    """Whether a node can be called now (the capability service answers it)."""

    @property
    def node_id(self) -> NodeId: ...

    def reachable(self, node_id: str) -> bool: ...


def serving_nodes(node: Node, model: str, *, single_host: bool) -> set[NodeId]:
    """The nodes that serve a ready instance of ``model``, from this node's State."""
    state = node.state
    found: set[NodeId] = set()
    for instance in state.instances.values():
        runners = instance.shard_assignments.runner_to_shard
        if instance.shard_assignments.model_id != ModelId(model) or not runners:
            continue
        if single_host and len(runners) != 1:
            continue
        if not all(isinstance(state.runners.get(r), RunnerReady | RunnerRunning) for r in runners):
            continue
        host = serving_node(instance)
        if host is not None:
            found.add(host)
    return found


def remote_candidates(
    node: Node, fabric: Reachability, model: str, tag: str | None, *, single_host: bool
) -> list[NodeId]:
    """Peers that could serve ``model`` now: ready there, advertising ``tag`` (unless
    ``None``: State alone), and reachable."""
    own = fabric.node_id
    telemetry = node.view().telemetry if tag is not None else {}
    return [
        peer
        for peer in sorted(serving_nodes(node, model, single_host=single_host))
        if peer != own
        and (tag is None or (peer in telemetry and tag in telemetry[peer].capabilities))
        and fabric.reachable(peer)
    ]


def pick_node(
    node: Node, fabric: Reachability, model: str, tag: str, *, single_host: bool
) -> NodeId | None:
    """This node when it serves ``model``; else the first reachable peer that does."""
    if fabric.node_id in serving_nodes(node, model, single_host=single_host):
        return fabric.node_id
    peers = remote_candidates(node, fabric, model, tag, single_host=single_host)
    return peers[0] if peers else None
