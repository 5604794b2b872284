"""The host-RAM prompt cache on the real demo model: a prefix a slot gave up to
another conversation comes back from RAM instead of being prefilled again, decodes
exactly as it would cold, never leaks past the shared prefix, and the cache keeps
to its byte budget."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from skulk_daemon.engines._llama_exact import EXACT_ROWS, FLASH_ATTENTION_TILE
from skulk_daemon.engines.base import PromptCacheStats
from tests.engines.serving import Served, serve
from tests.engines.test_prefix_reuse import OTHER, SECRET, SHARED

pytestmark = pytest.mark.slow

CHUNK = FLASH_ATTENTION_TILE
MIB = 1024**2
UNRELATED = (
    "Recipe for bread: mix five hundred grams of flour with water, salt and yeast, "
    "knead it for ten minutes, let it rise for an hour, shape it, let it rise again "
    "and bake it in a hot oven until the crust is brown and it sounds hollow. "
) * 2


@pytest.fixture(scope="module")
def cached(demo_gguf: Path) -> Iterator[Served]:
    """One slot, so every new conversation takes the slot from the last one."""
    yield from serve(demo_gguf, slots=1, prompt_cache_bytes=256 * MIB)


@pytest.fixture(scope="module")
def uncached(demo_gguf: Path) -> Iterator[Served]:
    yield from serve(demo_gguf, slots=1)


def _cache(served: Served) -> PromptCacheStats:
    stats = served.engine.stats().prompt_cache
    assert stats is not None
    return stats


def test_a_conversation_that_lost_its_slot_comes_back_from_ram(
    cached: Served, uncached: Served
) -> None:
    first = SHARED + SECRET
    cached.run("ram-first", first, max_tokens=4)
    before = _cache(cached)
    # Another conversation takes the only slot: the first one's cells go to RAM.
    cached.run("ram-other", UNRELATED, max_tokens=4)
    saved = _cache(cached)
    assert saved.saved == before.saved + 1 and saved.bytes > 0
    warm, end = cached.run("ram-again", first, max_tokens=16)
    # Everything but the last chunk (on whole rows) came back without a prefill...
    assert end.stats.cached_tokens == (end.prompt_tokens - CHUNK) // EXACT_ROWS * EXACT_ROWS > 0
    assert _cache(cached).restored == saved.restored + 1
    # ...and the answer is the one a cold engine gives.
    uncached.run("cold-evict", UNRELATED, max_tokens=1)
    cold, cold_end = uncached.run("cold", first, max_tokens=16)
    assert cold_end.stats.cached_tokens == 0
    assert warm == cold


def test_a_restored_prefix_stops_where_the_conversations_part(
    cached: Served, uncached: Served
) -> None:
    cached.run("part-secret", SHARED + SECRET, max_tokens=2)
    cached.run("part-evict", UNRELATED, max_tokens=2)
    question = SHARED + OTHER
    warm, end = cached.run("part-question", question, max_tokens=16)
    shared_tokens = uncached.run("part-measure", SHARED, max_tokens=1)[1].prompt_tokens
    assert 0 < end.stats.cached_tokens <= shared_tokens
    uncached.run("part-cold-evict", UNRELATED, max_tokens=1)
    cold, _ = uncached.run("part-cold", question, max_tokens=16)
    assert warm == cold


def test_without_a_budget_nothing_is_kept(uncached: Served) -> None:
    uncached.run("off-first", SHARED + SECRET, max_tokens=2)
    uncached.run("off-evict", UNRELATED, max_tokens=2)
    _, end = uncached.run("off-again", SHARED + SECRET, max_tokens=2)
    assert end.stats.cached_tokens == 0
    stats = _cache(uncached)
    assert stats.budget_bytes == 0 and stats.saved == 0 and stats.bytes == 0


def _story(i: int) -> str:
    return f"Story number {i}. " + SHARED


def test_the_cache_keeps_to_its_byte_budget(demo_gguf: Path, cached: Served) -> None:
    # What one of these conversations' cells take, measured on the roomy cache.
    cached.run("measure-story", _story(9), max_tokens=2)
    before = _cache(cached).bytes
    cached.run("measure-evict", UNRELATED, max_tokens=2)
    entry = _cache(cached).bytes - before
    assert entry > 0
    budget = entry * 5 // 2  # room for two
    for served in serve(demo_gguf, slots=1, prompt_cache_bytes=budget):
        for i in range(6):
            served.run(f"budget-{i}", _story(i), max_tokens=2)
            stats = _cache(served)
            assert stats.bytes <= budget
        stats = _cache(served)
        assert stats.saved == 5 and stats.evicted == 3 and stats.entries == 2
        # The most recent conversations are the ones kept.
        _, end = served.run("budget-recent", _story(4), max_tokens=2)
        assert end.stats.cached_tokens > 0
        restored = _cache(served).restored
        _, end = served.run("budget-oldest", _story(0), max_tokens=2)
        # Nothing comes back from RAM: only the slot's "Story number" lead is reused.
        assert _cache(served).restored == restored
        assert end.stats.cached_tokens < CHUNK
