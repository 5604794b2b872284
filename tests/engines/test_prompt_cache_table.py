"""The prompt cache's bookkeeping, without a model: LRU eviction within the byte
budget, prefixes superseded by longer entries, and the best match chosen."""

from __future__ import annotations

from skulk_daemon.engines._llama_prompt_cache import PromptCache
from skulk_daemon.engines._llama_slots import SlotTable

CHUNK = 4


def _cache(budget: int) -> PromptCache:
    return PromptCache(budget, SlotTable(1, CHUNK).reusable)


def test_the_least_recently_used_entry_goes_first() -> None:
    cache = _cache(30)
    a, b, c = [1] * 8, [2] * 8, [3] * 8
    assert cache.put(a, b"x" * 10) and cache.put(b, b"x" * 10) and cache.put(c, b"x" * 10)
    entry, n = cache.best([*a, 9])
    assert entry is not None and n == 8
    cache.restored(entry, n)  # a is now the most recent
    cache.put([4] * 8, b"x" * 10)
    assert cache.best([*b, 9])[0] is None  # b was the least recently used
    assert cache.best([*a, 9])[0] is not None and cache.best([*c, 9])[0] is not None
    stats = cache.stats()
    assert stats.bytes == 30 and stats.entries == 3 and stats.evicted == 1


def test_a_longer_prefix_replaces_the_shorter_one() -> None:
    cache = _cache(100)
    cache.put([1, 2, 3, 4], b"x" * 10)
    cache.put([1, 2, 3, 4, 5, 6, 7, 8], b"y" * 20)
    assert cache.stats().entries == 1 and cache.stats().bytes == 20
    assert cache.covers([1, 2, 3, 4]) and not cache.covers([1, 2, 3, 5])


def test_an_entry_larger_than_the_budget_is_not_kept() -> None:
    cache = _cache(10)
    assert not cache.put([1] * 8, b"x" * 11)
    assert cache.stats().entries == 0 and cache.stats().saved == 0
    assert not _cache(0).enabled


def test_the_best_match_gives_the_most_whole_chunks() -> None:
    cache = _cache(100)
    cache.put([1, 2, 3, 4, 5, 6, 7, 8], b"x")
    cache.put([1, 2, 3, 4, 9, 9, 9, 9, 9, 9, 9, 9], b"y")
    entry, n = cache.best([1, 2, 3, 4, 9, 9, 9, 9, 0])
    assert entry is not None and entry.data == b"y" and n == 8
    # The last prompt token is always left to decode.
    entry, n = cache.best([1, 2, 3, 4, 5, 6, 7, 8])
    assert n == 4
