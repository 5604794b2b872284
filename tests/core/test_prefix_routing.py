"""Replica routing by prompt prefix (pure): a request goes to the replica that holds
the longest prefix of its prompt, unless that replica is saturated or unavailable;
otherwise, and among equals, to the least loaded."""

from __future__ import annotations

import msgspec

from skulk_core.cluster.prefixes import (
    BLOCK_BYTES,
    MAX_HASHES,
    MAX_PROMPTS,
    InstancePrefixes,
    PrefixIndex,
    RoutedPrompts,
    held_blocks,
    prefix_holders,
    prompt_fingerprint,
)
from skulk_core.cluster.routing import SATURATED_TASKS, select_instance
from skulk_core.ids import CommandId, InstanceId, TaskId
from skulk_core.state.shards import RunnerFailed, RunnerReady
from skulk_core.state.state import State, Task, TaskStatus
from tests.core.test_worker_plan import MODEL, _instance, _state

SYSTEM = "You are a careful assistant. " * 40
CONVERSATION = SYSTEM + "User: tell me about lighthouses. " * 30


def _held(*prompts: str) -> frozenset[int]:
    index = PrefixIndex()
    for prompt in prompts:
        index.record(prompt_fingerprint(prompt))
    return frozenset(index.hashes())


def _busy(state: State, instance_id: str, count: int) -> State:
    tasks = {
        TaskId(f"{instance_id}-{i}"): Task(
            task_id=TaskId(f"{instance_id}-{i}"),
            command_id=CommandId(f"c-{instance_id}-{i}"),
            instance_id=InstanceId(instance_id),
            kind="TextGeneration",
            task_status=TaskStatus.RUNNING,
        )
        for i in range(count)
    }
    return msgspec.structs.replace(state, tasks={**state.tasks, **tasks})


def test_a_fingerprint_chains_whole_blocks() -> None:
    text = "x" * (3 * BLOCK_BYTES + 10)
    chain = prompt_fingerprint(text)
    assert len(chain) == 3  # the partial last block has no hash
    assert prompt_fingerprint(text + "more") == chain  # still inside the partial block
    changed = "y" + text[1:]
    # A change in the first block changes every later hash: one hash names a prefix.
    assert not set(prompt_fingerprint(changed)) & set(chain)
    assert held_blocks(chain, frozenset(chain[:2])) == 2
    assert held_blocks(chain, frozenset(chain[1:])) == 0  # a gap ends the prefix
    assert prompt_fingerprint("short") == ()


def test_the_replica_holding_the_conversation_serves_its_next_turn() -> None:
    first, second = _instance("a", "r1"), _instance("b", "r2")
    state = _state((first, RunnerReady()), (second, RunnerReady()))
    turn2 = CONVERSATION + "Assistant: they guide ships. User: and in winter? "
    held = {second.instance_id: _held(CONVERSATION)}
    # Without prefixes the tie goes to id order (a); the holder wins with them.
    assert select_instance(state, MODEL).instance_id == first.instance_id  # type: ignore[union-attr]
    chosen = select_instance(state, MODEL, fingerprint=prompt_fingerprint(turn2), held=held)
    assert chosen is not None and chosen.instance_id == second.instance_id
    # Even when it is busier, while it is not saturated.
    busier = _busy(state, "b", SATURATED_TASKS - 1)
    chosen = select_instance(busier, MODEL, fingerprint=prompt_fingerprint(turn2), held=held)
    assert chosen is not None and chosen.instance_id == second.instance_id


def test_the_longer_held_prefix_wins_and_a_shared_one_balances() -> None:
    first, second = _instance("a", "r1"), _instance("b", "r2")
    state = _state((first, RunnerReady()), (second, RunnerReady()))
    fingerprint = prompt_fingerprint(CONVERSATION)
    # Both hold the system prompt; only a holds the conversation.
    held = {first.instance_id: _held(CONVERSATION), second.instance_id: _held(SYSTEM)}
    loaded = _busy(state, "a", 2)
    chosen = select_instance(loaded, MODEL, fingerprint=fingerprint, held=held)
    assert chosen is not None and chosen.instance_id == first.instance_id
    # A new conversation sharing only the system prompt goes to the less loaded one.
    other = prompt_fingerprint(SYSTEM + "User: something else entirely. " * 20)
    chosen = select_instance(loaded, MODEL, fingerprint=other, held=held)
    assert chosen is not None and chosen.instance_id == second.instance_id


def test_a_saturated_or_failed_holder_falls_back_to_the_least_loaded() -> None:
    first, second = _instance("a", "r1"), _instance("b", "r2")
    state = _state((first, RunnerReady()), (second, RunnerReady()))
    fingerprint = prompt_fingerprint(CONVERSATION)
    held = {second.instance_id: _held(CONVERSATION)}
    saturated = _busy(state, "b", SATURATED_TASKS)
    chosen = select_instance(saturated, MODEL, fingerprint=fingerprint, held=held)
    assert chosen is not None and chosen.instance_id == first.instance_id
    failed = _state((first, RunnerReady()), (second, RunnerFailed(error_message="gone")))
    chosen = select_instance(failed, MODEL, fingerprint=fingerprint, held=held)
    assert chosen is not None and chosen.instance_id == first.instance_id


def test_an_index_stays_bounded_and_keeps_the_newest_prompts() -> None:
    index = PrefixIndex()
    for i in range(MAX_PROMPTS + 8):
        index.record(prompt_fingerprint(f"conversation {i:04d} " + "z" * 2 * BLOCK_BYTES))
    hashes = set(index.hashes())
    newest = prompt_fingerprint(f"conversation {MAX_PROMPTS + 7:04d} " + "z" * 2 * BLOCK_BYTES)
    oldest = prompt_fingerprint("conversation 0000 " + "z" * 2 * BLOCK_BYTES)
    assert set(newest) <= hashes and not set(oldest) & hashes
    huge = PrefixIndex()
    huge.record(prompt_fingerprint("w" * BLOCK_BYTES * (MAX_HASHES + 50)))
    assert len(huge.hashes()) == MAX_HASHES
    # The next turn of a conversation replaces its earlier turn.
    turns = PrefixIndex()
    turns.record(prompt_fingerprint(CONVERSATION))
    turns.record(prompt_fingerprint(CONVERSATION + "more " * 200))
    assert len(turns.hashes()) == len(prompt_fingerprint(CONVERSATION + "more " * 200))


def test_published_prefixes_merge_and_drop_instances_no_longer_placed() -> None:
    routed = RoutedPrompts()
    routed.record(InstanceId("a"), prompt_fingerprint(CONVERSATION))
    routed.record(InstanceId("gone"), prompt_fingerprint(SYSTEM))
    published = routed.published({InstanceId("a")})
    assert [p.instance_id for p in published] == [InstanceId("a")]
    remote = (InstancePrefixes(instance_id=InstanceId("a"), hashes=(1, 2)),)
    holders = prefix_holders([published, remote])
    assert {1, 2} <= holders[InstanceId("a")]
    assert set(prompt_fingerprint(CONVERSATION)) <= holders[InstanceId("a")]
