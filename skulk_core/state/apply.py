"""``apply(state, indexed_event) -> state``: the only way State changes."""

from __future__ import annotations

from typing import assert_never

import msgspec

from skulk_core.ids import InstanceId
from skulk_core.state.events import (
    ClusterSettingsSet,
    ConnectionsReported,
    CustomModelCardAdded,
    CustomModelCardRemoved,
    DownloadProgressUpdated,
    Event,
    IndexedEvent,
    InstanceCreated,
    InstanceDeleted,
    InstanceFailed,
    KeepAliveSet,
    MasterElected,
    NodeJoined,
    NodeLeft,
    ProposalChanged,
    ProposalCreated,
    RunnerStatusUpdated,
    StagingPurged,
    StoreHostAnnounced,
    StoreModelEvicted,
    TaskCreated,
    TaskDeleted,
    TaskStatusUpdated,
    TracingSet,
)
from skulk_core.state.proposal_rules import apply_proposal, note_instance_effect
from skulk_core.state.state import (
    MAX_INSTANCE_FAILURES,
    MAX_REIGNS,
    MAX_STORE_EVICTIONS,
    Reign,
    State,
    Topology,
)


class OutOfOrderEvent(Exception):
    """Raised when an event does not directly follow the last applied index."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"expected event index {expected}, got {got}")
        self.expected = expected
        self.got = got


def apply(state: State, indexed: IndexedEvent) -> State:
    """Apply one indexed event. Refuses anything but the next index."""
    expected = state.last_event_applied_idx + 1
    if indexed.idx != expected:
        raise OutOfOrderEvent(expected, indexed.idx)
    next_state = _apply_event(state, indexed.event)
    if isinstance(indexed.event, MasterElected):
        reign = Reign(
            term=indexed.event.term,
            master_node_id=indexed.event.master_node_id,
            first_idx=indexed.idx,
        )
        next_state = msgspec.structs.replace(
            next_state, reigns=(*next_state.reigns, reign)[-MAX_REIGNS:]
        )
    last_seen = {**next_state.last_seen, indexed.origin: indexed.recorded_at}
    return msgspec.structs.replace(
        next_state, last_seen=last_seen, last_event_applied_idx=indexed.idx
    )


def _without_instance(state: State, instance_id: InstanceId) -> State:
    instance = state.instances.get(instance_id)
    if instance is None:
        return state
    runner_ids = set(instance.shard_assignments.node_to_runner.values())
    return msgspec.structs.replace(
        state,
        instances={k: v for k, v in state.instances.items() if k != instance_id},
        runners={k: v for k, v in state.runners.items() if k not in runner_ids},
        tasks={k: v for k, v in state.tasks.items() if v.instance_id != instance_id},
        placement_intents={k: v for k, v in state.placement_intents.items() if k != instance_id},
        instance_cards={k: v for k, v in state.instance_cards.items() if k != instance_id},
    )


def _apply_event(state: State, event: Event) -> State:
    replace = msgspec.structs.replace
    match event:
        case NodeJoined(node_id=node_id):
            if node_id in state.topology.nodes:
                return state
            topology = replace(state.topology, nodes=(*state.topology.nodes, node_id))
            return replace(state, topology=topology)
        case NodeLeft(node_id=node_id):
            return replace(
                state,
                topology=Topology(
                    nodes=tuple(n for n in state.topology.nodes if n != node_id),
                    connections=tuple(
                        c
                        for c in state.topology.connections
                        if node_id not in (c.local_node_id, c.send_back_node_id)
                    ),
                ),
                last_seen={k: v for k, v in state.last_seen.items() if k != node_id},
                downloads={k: v for k, v in state.downloads.items() if k != node_id},
                store_hosts={k: v for k, v in state.store_hosts.items() if k != node_id},
            )
        case MasterElected(master_node_id=master, term=term):
            return replace(state, master_node_id=master, election_term=term)
        case ConnectionsReported(node_id=node_id, connections=connections):
            kept = tuple(c for c in state.topology.connections if c.local_node_id != node_id)
            known = set(state.topology.nodes)
            edges = tuple(c for c in connections if c.send_back_node_id in known)
            return replace(state, topology=replace(state.topology, connections=kept + edges))
        case InstanceCreated(instance=instance, intent=intent, card=card):
            intents = state.placement_intents
            if intent is not None:
                intents = {**intents, instance.instance_id: intent}
            cards = state.instance_cards
            if card is not None:
                cards = {**cards, instance.instance_id: card}
            placed = replace(
                state,
                instances={**state.instances, instance.instance_id: instance},
                placement_intents=intents,
                instance_cards=cards,
            )
            return note_instance_effect(placed, created=instance.instance_id)
        case InstanceDeleted(instance_id=instance_id):
            return note_instance_effect(_without_instance(state, instance_id), deleted=instance_id)
        case KeepAliveSet(instance_id=instance_id, keep_alive_seconds=seconds):
            intent = state.placement_intents.get(instance_id)
            if intent is None:
                return state
            with_keep_alive = replace(intent, keep_alive_seconds=seconds)
            return replace(
                state, placement_intents={**state.placement_intents, instance_id: with_keep_alive}
            )
        case InstanceFailed(failure=failure):
            failures = (failure, *state.instance_failures)[:MAX_INSTANCE_FAILURES]
            return _without_instance(
                replace(state, instance_failures=failures), failure.instance_id
            )
        case RunnerStatusUpdated(runner_id=runner_id, status=status):
            return replace(state, runners={**state.runners, runner_id: status})
        case TaskCreated(task=task):
            return replace(state, tasks={**state.tasks, task.task_id: task})
        case TaskStatusUpdated(task_id=task_id, task_status=task_status):
            current = state.tasks.get(task_id)
            if current is None:
                return state
            updated = replace(current, task_status=task_status)
            return replace(state, tasks={**state.tasks, task_id: updated})
        case TaskDeleted(task_id=task_id):
            return replace(state, tasks={k: v for k, v in state.tasks.items() if k != task_id})
        case DownloadProgressUpdated(node_id=node_id, progress=progress):
            others = tuple(
                p for p in state.downloads.get(node_id, ()) if p.model_id != progress.model_id
            )
            return replace(state, downloads={**state.downloads, node_id: (*others, progress)})
        case CustomModelCardAdded(card=card):
            return replace(
                state, custom_model_cards={**state.custom_model_cards, card.model_id: card}
            )
        case CustomModelCardRemoved(model_id=model_id):
            return replace(
                state,
                custom_model_cards={
                    k: v for k, v in state.custom_model_cards.items() if k != model_id
                },
            )
        case TracingSet(enabled=enabled):
            return replace(state, tracing_enabled=enabled)
        case ClusterSettingsSet(settings=settings):
            return replace(state, cluster_settings=settings)
        case StoreHostAnnounced(node_id=node_id, store=store):
            hosts = {k: v for k, v in state.store_hosts.items() if k != node_id}
            if store is not None:
                hosts[node_id] = store
            return replace(state, store_hosts=hosts)
        case StoreModelEvicted(model_id=model_id, evicted_at=evicted_at):
            # The store's own copy is gone too: no node reports it downloaded any more.
            downloads = {
                node: tuple(p for p in reports if p.model_id != model_id)
                for node, reports in state.downloads.items()
            }
            evictions = {k: v for k, v in state.store_evictions.items() if k != model_id}
            evictions[model_id] = evicted_at
            recent = dict(list(evictions.items())[-MAX_STORE_EVICTIONS:])
            return replace(state, downloads=downloads, store_evictions=recent)
        case StagingPurged(model_id=model_id, purged_at=purged_at):
            if model_id is None:
                return replace(state, staging_purged_all_at=purged_at)
            purges = {k: v for k, v in state.staging_purges.items() if k != model_id}
            purges[model_id] = purged_at
            return replace(state, staging_purges=dict(list(purges.items())[-MAX_STORE_EVICTIONS:]))
        case ProposalCreated() | ProposalChanged():
            return apply_proposal(state, event)
        case _:
            assert_never(event)
