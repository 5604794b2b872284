"""The prompt cache's bookkeeping, without a model: LRU eviction within the byte
budget, prefixes superseded by longer entries, the best match chosen, and exact
cells kept apart from the rest."""

from __future__ import annotations

from skulk_daemon.engines._llama_exact import ExactBatching
from skulk_daemon.engines._llama_prompt_cache import PromptCache
from skulk_daemon.engines._llama_slots import SlotTable

# Every cell of a prompt decoded cold exact (the rule's own cases are in test_llama_exact.py).
RULE = ExactBatching(1, 1, widest=16)


def _cache(budget: int) -> PromptCache:
    return PromptCache(budget, SlotTable(1, RULE).reusable)


def _put(cache: PromptCache, tokens: list[int], data: bytes) -> bool:
    """An entry decoded cold: exact but for its last rows."""
    return cache.put(tokens, RULE.exact_after(len(tokens)), data)


def test_the_least_recently_used_entry_goes_first() -> None:
    cache = _cache(30)
    a, b, c = [1] * 8, [2] * 8, [3] * 8
    assert _put(cache, a, b"x" * 10) and _put(cache, b, b"x" * 10) and _put(cache, c, b"x" * 10)
    entry, n = cache.best([*a, 9], True)
    assert entry is not None and n == 8
    cache.restored(entry, n)  # a is now the most recent
    _put(cache, [4] * 8, b"x" * 10)
    assert cache.best([*b, 9], True)[0] is None  # b was the least recently used
    assert cache.best([*a, 9], True)[0] is not None and cache.best([*c, 9], True)[0] is not None
    stats = cache.stats()
    assert stats.bytes == 30 and stats.entries == 3 and stats.evicted == 1


def test_a_longer_prefix_replaces_the_shorter_one() -> None:
    cache = _cache(100)
    _put(cache, [1, 2, 3, 4], b"x" * 10)
    _put(cache, [1, 2, 3, 4, 5, 6, 7, 8], b"y" * 20)
    assert cache.stats().entries == 1 and cache.stats().bytes == 20
    assert cache.covers([1, 2, 3, 4], 4) and not cache.covers([1, 2, 3, 5], 0)


def test_a_longer_entry_with_fewer_exact_cells_keeps_the_exact_one() -> None:
    cache = _cache(100)
    _put(cache, [1, 2, 3, 4, 5, 6, 7, 8], b"x")
    # The same prompt, then a reply: more cells, but only the first four exact.
    cache.put([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 4, b"y")
    assert cache.stats().entries == 2
    assert not cache.covers([1, 2, 3, 4, 5, 6, 7, 8, 9], 8)
    entry, n = cache.best([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], True)
    assert entry is not None and entry.data == b"x" and n == 8
    entry, n = cache.best([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], False)
    assert entry is not None and entry.data == b"y" and n == 10


def test_an_entry_larger_than_the_budget_is_not_kept() -> None:
    cache = _cache(10)
    assert not _put(cache, [1] * 8, b"x" * 11)
    assert cache.stats().entries == 0 and cache.stats().saved == 0
    assert not _cache(0).enabled


def test_the_best_match_gives_the_most_exact_cells() -> None:
    cache = _cache(100)
    _put(cache, [1, 2, 3, 4, 5, 6, 7, 8], b"x")
    _put(cache, [1, 2, 3, 4, 9, 9, 9, 9, 9, 9, 9, 9], b"y")
    entry, n = cache.best([1, 2, 3, 4, 9, 9, 9, 9, 0], True)
    assert entry is not None and entry.data == b"y" and n == 8
    # The last prompt token is always left to decode.
    entry, n = cache.best([1, 2, 3, 4, 5, 6, 7, 8], True)
    assert entry is not None and entry.data == b"x" and n == 7


def test_keeping_what_a_slot_loses_saves_its_state_only_when_no_entry_holds_it() -> None:
    cache = _cache(30)
    saves: list[int] = []

    def save(size: int) -> bytes | None:
        saves.append(size)
        return None if size == 0 else b"x" * size

    tokens = [1] * 8
    assert cache.keep(tokens, 8, lambda: save(10))
    assert cache.keep(tokens[:4], 4, lambda: save(10))  # held by the entry above
    assert saves == [10]
    assert not cache.keep([2] * 8, 8, lambda: save(0))  # no state to be had
    assert not cache.keep([3] * 8, 8, lambda: save(40))  # more than the whole budget
    assert cache.stats().entries == 1
