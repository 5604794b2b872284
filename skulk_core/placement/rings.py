"""Candidate cycles: sets of nodes the topology connects into a ring.

A multi-node placement passes activations around a ring, so every consecutive
pair of its nodes must share a connection (in either direction). One node is a
ring of one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

from skulk_core.ids import NodeId
from skulk_core.state.state import Connection

# NOTE: the subsets of k nodes grow combinatorially with the cluster. Subsets are
# visited best-ranked nodes first and the search stops after this many, which keeps
# a preview of a tens-of-nodes cluster cheap while still finding the strong rings.
MAX_SUBSETS_PER_SIZE: Final = 32


def adjacency(connections: Iterable[Connection]) -> dict[NodeId, set[NodeId]]:
    edges: dict[NodeId, set[NodeId]] = {}
    for c in connections:
        if c.local_node_id == c.send_back_node_id:
            continue
        edges.setdefault(c.local_node_id, set()).add(c.send_back_node_id)
        edges.setdefault(c.send_back_node_id, set()).add(c.local_node_id)
    return edges


def ring_order(
    nodes: Sequence[NodeId], edges: dict[NodeId, set[NodeId]]
) -> tuple[NodeId, ...] | None:
    """An order of ``nodes`` in which each one connects to the next (and the last to
    the first), starting from ``nodes[0]``; ``None`` when there is none."""
    if len(nodes) == 1:
        return (nodes[0],)
    members = set(nodes)
    rank = {node: i for i, node in enumerate(nodes)}

    def extend(path: list[NodeId]) -> list[NodeId] | None:
        if len(path) == len(nodes):
            closes = len(nodes) == 2 or nodes[0] in edges.get(path[-1], set())
            return path if closes else None
        neighbours = sorted(edges.get(path[-1], set()) & members - set(path), key=rank.__getitem__)
        for nxt in neighbours:
            found = extend([*path, nxt])
            if found is not None:
                return found
        return None

    found = extend([nodes[0]])
    return None if found is None else tuple(found)


def candidate_rings(
    ranked: Sequence[NodeId],
    connections: Iterable[Connection],
    size: int,
    required: frozenset[NodeId] = frozenset(),
) -> Iterator[tuple[NodeId, ...]]:
    """Rings of ``size`` nodes drawn from ``ranked`` (best first) that contain ``required``."""
    if size < 1 or size > len(ranked) or len(required) > size or not required <= set(ranked):
        return
    edges = adjacency(connections)
    rank = {node: i for i, node in enumerate(ranked)}
    others = [node for node in ranked if node not in required]
    subsets = itertools.combinations(others, size - len(required))
    for extra in itertools.islice(subsets, MAX_SUBSETS_PER_SIZE):
        subset = sorted([*required, *extra], key=rank.__getitem__)
        ring = ring_order(subset, edges)
        if ring is not None:
            yield ring
