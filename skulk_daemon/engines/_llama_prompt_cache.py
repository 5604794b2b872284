"""A host-RAM cache of prompt prefixes whose slot was given to another prompt.

When a slot is taken by a prompt that does not extend what the slot held, the
engine saves the held cells (llama.cpp's sequence state) here before trimming
them. A later prompt that starts with a saved prefix, longer than anything a
slot still holds, gets the cells restored into its slot instead of prefilling
them again: conversations survive slot turnover, the way llama-server's
``--cache-ram`` keeps them.

The cache is bounded in bytes and evicts the least recently used entry first.
An entry whose tokens are a prefix of a newer one is dropped (the newer one
holds everything it did). A budget of 0 turns the cache off. Used from the
engine's scheduler thread only.

NOTE: an entry keeps what the slot table knew of its cells (see
:mod:`._llama_slots`): the tokens behind them and how many lead with exact ones.
A request that must be reproducible is given exact cells only, which are what a
cold prefill of those tokens writes, so reuse keeps temperature-0 output the
same.
"""

from __future__ import annotations

from collections.abc import Callable

from skulk_daemon.engines.base import PromptCacheStats


class CachedPrefix:
    """One saved prefix: its tokens (the first ``exact`` of them with exact cells)
    and the sequence state holding their cells."""

    __slots__ = ("data", "exact", "last_used", "tokens")

    def __init__(self, tokens: list[int], exact: int, data: bytes, last_used: int) -> None:
        self.tokens = tokens
        self.exact = exact
        self.data = data
        self.last_used = last_used


Reusable = Callable[[list[int], int, list[int], bool], int]
"""``(held tokens, how many lead with exact cells, prompt, exact cells only) -> how
many leading prompt tokens the cells can give`` (:meth:`SlotTable.reusable`)."""


class PromptCache:
    def __init__(self, budget_bytes: int, reusable: Reusable) -> None:
        if budget_bytes < 0:
            raise ValueError(f"the prompt cache budget must not be negative, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self._reusable = reusable
        self._entries: list[CachedPrefix] = []
        self._bytes = 0
        self._clock = 0
        self._saved = 0
        self._restored = 0
        self._restored_tokens = 0
        self._evicted = 0

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    def covers(self, tokens: list[int], exact: int) -> bool:
        """Whether an entry already holds every cell of ``tokens``, at least the
        first ``exact`` of them exact."""
        return any(_holds(entry, tokens, exact) for entry in self._entries)

    def best(self, prompt: list[int], strict: bool) -> tuple[CachedPrefix | None, int]:
        """The entry giving ``prompt`` the most reusable tokens, and how many
        (``strict``: exact cells only)."""
        found: CachedPrefix | None = None
        most = 0
        for entry in self._entries:
            n = self._reusable(entry.tokens, entry.exact, prompt, strict)
            if n > most:
                found, most = entry, n
        return found, most

    def put(self, tokens: list[int], exact: int, data: bytes) -> bool:
        """Keep ``data`` (the cells of ``tokens``, the first ``exact`` of them
        exact); False when it cannot fit at all. Entries it holds whole go."""
        size = len(data)
        if not tokens or size == 0 or size > self.budget_bytes:
            return False
        new = CachedPrefix(tokens, exact, data, 0)
        for entry in [e for e in self._entries if _holds(new, e.tokens, e.exact)]:
            self._drop(entry)
        while self._entries and self._bytes + size > self.budget_bytes:
            self._drop(min(self._entries, key=lambda e: e.last_used))
            self._evicted += 1
        self._clock += 1
        new.last_used = self._clock
        self._entries.append(new)
        self._bytes += size
        self._saved += 1
        return True

    def keep(self, tokens: list[int], exact: int, save: Callable[[], bytes | None]) -> bool:
        """Make sure the cache holds what a slot is about to lose (``tokens``, the
        first ``exact`` exact), taking ``save()``'s state of it unless an entry
        already does: False when it does not (the state could not be had, or
        cannot fit)."""
        if self.covers(tokens, exact):
            return True
        data = save()
        return data is not None and self.put(tokens, exact, data)

    def restored(self, entry: CachedPrefix, tokens: int) -> None:
        """``entry`` gave a slot ``tokens`` prompt tokens' cells."""
        self._clock += 1
        entry.last_used = self._clock
        self._restored += 1
        self._restored_tokens += tokens

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def stats(self) -> PromptCacheStats:
        return PromptCacheStats(
            budget_bytes=self.budget_bytes,
            bytes=self._bytes,
            entries=len(self._entries),
            saved=self._saved,
            restored=self._restored,
            restored_tokens=self._restored_tokens,
            evicted=self._evicted,
        )

    def _drop(self, entry: CachedPrefix) -> None:
        self._entries.remove(entry)
        self._bytes -= len(entry.data)


def _holds(entry: CachedPrefix, tokens: list[int], exact: int) -> bool:
    """Whether ``entry`` has every cell of ``tokens`` and at least ``exact`` exact."""
    n = len(tokens)
    return len(entry.tokens) >= n and entry.exact >= exact and entry.tokens[:n] == tokens
