"""Healing a partition without losing changes (pure).

With no quorum, both sides of a partition elect a master. When it heals, the side
whose master wins keeps its history, and every node of the other side installs the
winner's snapshot. The changes the losing side ordered after the split are in
events whose reign (term, master) the winner's history never had.

:func:`lost_changes` finds those a node itself originated (so each change is
resubmitted once, by the node that asked for it) and turns each back into the
command that made it. :func:`replay` says, for each, whether it still makes sense
against the winner's State, or why it is refused. Only user intent is replayed:
placements and deletions, custom cards, the tracing switch. Runner phases, tasks,
membership and connections are re-reported by the live nodes themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from skulk_core.ids import NodeId, new_command_id
from skulk_core.state.commands import (
    AddCustomCard,
    Command,
    CreateInstance,
    DeleteInstance,
    RemoveCustomCard,
    SetClusterSettings,
    SetTracing,
)
from skulk_core.state.events import (
    ClusterSettingsSet,
    CustomModelCardAdded,
    CustomModelCardRemoved,
    IndexedEvent,
    InstanceCreated,
    InstanceDeleted,
    TracingSet,
)
from skulk_core.state.state import MAX_REIGNS, State


@dataclass(frozen=True, slots=True)
class LostChange:
    command: Command
    what: str
    """For people: "placement of instance X", "custom card for Y"."""
    idx: int
    """Where it stood in the losing history."""


@dataclass(frozen=True, slots=True)
class Replay:
    change: LostChange
    refused: str | None
    """None: submit it again; else why it no longer makes sense."""


def lost_changes(
    events: Iterable[IndexedEvent], winner: State, node_id: NodeId
) -> list[LostChange]:
    """The changes ``node_id`` originated that the winner's history lacks: each event
    whose index the winner holds under another reign, or past the winner's end."""
    spans = _reign_spans(winner)
    if not spans:
        return []  # a history from before reigns were kept: nothing can be told apart
    oldest = spans[0][2] if spans else 0
    full = len(winner.reigns) >= MAX_REIGNS
    changes: list[LostChange] = []
    for indexed in events:
        if indexed.origin != node_id or indexed.indexed_by is None:
            continue
        if full and indexed.idx < oldest:
            continue  # older than what the winner remembers: shared history
        if any(
            (term, master) == (indexed.term, indexed.indexed_by) and start <= indexed.idx < end
            for term, master, start, end in spans
        ):
            continue
        change = _command(indexed)
        if change is not None:
            changes.append(change)
    return _net(changes)


def _reign_spans(winner: State) -> list[tuple[int, NodeId, int, int]]:
    """(term, master, first index, end index) of each reign in the winner's history."""
    reigns = winner.reigns
    if not reigns:
        return []
    ends = [r.first_idx for r in reigns[1:]] + [winner.last_event_applied_idx + 1]
    return [
        (r.term, r.master_node_id, r.first_idx, end) for r, end in zip(reigns, ends, strict=True)
    ]


def _command(indexed: IndexedEvent) -> LostChange | None:
    # A fresh id: the resubmission is a new command, whatever the master remembers.
    command_id = new_command_id()
    match indexed.event:
        case InstanceCreated(instance=instance, intent=intent, card=card):
            return LostChange(
                CreateInstance(command_id=command_id, instance=instance, intent=intent, card=card),
                f"placement of instance {instance.instance_id}",
                indexed.idx,
            )
        case InstanceDeleted(instance_id=instance_id):
            return LostChange(
                DeleteInstance(command_id=command_id, instance_id=instance_id),
                f"deletion of instance {instance_id}",
                indexed.idx,
            )
        case CustomModelCardAdded(card=card):
            return LostChange(
                AddCustomCard(command_id=command_id, card=card),
                f"custom card for {card.model_id}",
                indexed.idx,
            )
        case CustomModelCardRemoved(model_id=model_id):
            return LostChange(
                RemoveCustomCard(command_id=command_id, model_id=model_id),
                f"removal of the custom card for {model_id}",
                indexed.idx,
            )
        case TracingSet(enabled=enabled):
            return LostChange(
                SetTracing(command_id=command_id, enabled=enabled),
                f"tracing {'on' if enabled else 'off'}",
                indexed.idx,
            )
        case ClusterSettingsSet(settings=settings):
            return LostChange(
                SetClusterSettings(command_id=command_id, settings=settings),
                "cluster-wide settings",
                indexed.idx,
            )
        case _:
            return None


def _net(changes: list[LostChange]) -> list[LostChange]:
    """An instance placed and deleted again on the losing side is no change at all."""
    created = {
        c.command.instance.instance_id for c in changes if isinstance(c.command, CreateInstance)
    }
    deleted = {c.command.instance_id for c in changes if isinstance(c.command, DeleteInstance)}
    both = created & deleted
    return [
        c
        for c in changes
        if not (
            (isinstance(c.command, CreateInstance) and c.command.instance.instance_id in both)
            or (isinstance(c.command, DeleteInstance) and c.command.instance_id in both)
        )
    ]


def replay(changes: Iterable[LostChange], winner: State) -> list[Replay]:
    """Each change with whether it still applies to the winner's State."""
    members = set(winner.topology.nodes)
    replays: list[Replay] = []
    for change in changes:
        refused: str | None = None
        match change.command:
            case CreateInstance(instance=instance):
                missing = sorted(set(instance.shard_assignments.node_to_runner) - members)
                if instance.instance_id in winner.instances:
                    refused = "the healed cluster already has an instance with this id"
                elif missing:
                    refused = f"its nodes are not members of the healed cluster: {missing}"
            case DeleteInstance(instance_id=instance_id):
                if instance_id not in winner.instances:
                    refused = "the healed cluster has no such instance"
            case RemoveCustomCard(model_id=model_id):
                if model_id not in winner.custom_model_cards:
                    refused = "the healed cluster has no custom card for this model"
            case _:
                pass
        replays.append(Replay(change, refused))
    return replays
