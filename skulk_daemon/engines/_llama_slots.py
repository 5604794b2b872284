"""Which slot a prompt takes, and how much of it the KV cache already holds.

Each slot (a llama.cpp sequence) keeps its KV cells after a request, and this
table remembers the tokens behind them: the last prompt and the reply tokens
generation steps decoded after it. A new prompt takes the free slot holding its
longest reusable prefix, or a copy of a longer one another slot (free or busy)
holds (see :meth:`SlotTable.place`).

NOTE: only *exact* cells are reused for a request whose output must not depend
on what was served before (temperature 0, or a seed): the cells a cold decode of
the prompt writes, bit for bit (see ``_llama_exact``: the engine batches every
prompt so that all its cells but the last ``len % 4`` are, and a reply's never
are). A conversation's next greedy turn therefore reuses its previous prompt
but for up to three tokens, and prefills the reply and the new text (when those
come to less than a chunk, it resumes earlier: a chunk is always decoded).

A slot whose last request was reproducible is *settled* while the engine is
idle: the engine decodes its inexact cells again the exact way (see
:meth:`SlotTable.unsettled`), so a next greedy turn that comes after a pause
reuses its reply too. Where that decode would first drop exact cells, it goes
into a copy of the slot in a spare one (see :meth:`SlotTable.settle_from`).

A sampled request without a seed has no output to reproduce, so where its
common prefix reaches past the exact cells it reuses all of it, a reply's cells
included, as llama.cpp's server does: a sampled conversation's next turn
prefills only its new text. With ``reuse_replies`` (the daemon's default; off
is the operator's bit-exact mode) every request reuses the whole common prefix,
however short and wherever it parts, temperature 0 included, as llama-server
does: its output may then differ from a cold prompt's in the last bits, and no
slot is ever settled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ._llama_exact import ExactBatching

NO_SOURCE: Final = -1


class Slot:
    """One sequence id and the tokens whose cells it still holds."""

    __slots__ = ("busy", "exact", "index", "last_used", "settle", "tokens")

    def __init__(self, index: int) -> None:
        self.index = index
        self.tokens: list[int] = []
        """The tokens whose cells are kept: the last prompt, then its reply's."""
        self.exact = 0
        """How many of ``tokens`` lead with exact cells (a multiple of the rule's rows)."""
        self.last_used = 0
        self.busy = False
        self.settle = False
        """Its last request was placed strict (exact cells only), so its next (the
        conversation's next turn) likely will be: its inexact cells are worth
        decoding again once it is free."""


class Placement:
    """Where a prompt goes: ``slot``, with its first ``reused`` tokens' cells kept
    (copied from slot ``source`` first, unless that is :data:`NO_SOURCE`), the
    first ``exact`` of them exact. ``strict``: the request reuses exact cells only.
    ``evicted`` is what the slot held before (its first ``evicted_exact`` exact),
    when placing the prompt there loses some of it and no other slot still holds
    it all (the engine may save it)."""

    __slots__ = ("evicted", "evicted_exact", "exact", "reused", "slot", "source", "strict")

    def __init__(
        self, slot: int, reused: int, source: int = NO_SOURCE, *, exact: int = 0, strict: bool
    ) -> None:
        self.slot = slot
        self.reused = reused
        self.source = source
        self.exact = exact
        self.strict = strict
        self.evicted: list[int] = []
        self.evicted_exact = 0


Kept = Callable[[list[int], int], bool]
"""Whether ``tokens``, the first ``exact`` of them exact, are kept outside the slots."""


def _nowhere(_tokens: list[int], _exact: int) -> bool:
    return False


class SettlePlan:
    """How to settle a slot: its ``tokens`` decoded again from ``start`` into slot
    ``into`` (itself, or a spare that takes a copy of it first), after saving
    ``evicted`` (what ``into`` held, the first ``evicted_exact`` exact) when the
    spare was not free to lose."""

    __slots__ = ("evicted", "evicted_exact", "into", "start", "tokens")

    def __init__(self, tokens: list[int], start: int, into: int) -> None:
        self.tokens = tokens
        self.start = start
        self.into = into
        self.evicted: list[int] = []
        self.evicted_exact = 0


class SlotTable:
    """The engine's slots; used from its scheduler thread only."""

    def __init__(self, slots: int, rule: ExactBatching, *, reuse_replies: bool = False) -> None:
        self.reuse_replies = reuse_replies
        self.rule = rule
        """Which cells are exact, and where a reproducible prompt resumes."""
        self._slots = [Slot(i) for i in range(slots)]
        self._clock = 0

    def has_free(self) -> bool:
        return any(not slot.busy for slot in self._slots)

    def strict(self, reproducible: bool) -> bool:
        """Whether a request reuses exact cells only: one whose output must be
        reproducible (temperature 0, a seed), unless ``reuse_replies`` is on."""
        return reproducible and not self.reuse_replies

    def reusable(self, held: list[int], exact: int, prompt: list[int], strict: bool) -> int:
        """Tokens of ``prompt`` whose cells a sequence holding ``held`` (the first
        ``exact`` of them exact) can give, always leaving the last prompt token to
        decode (its logits pick the first token): the common prefix among the
        exact cells, cut back to where the rule resumes (a multiple of its rows,
        at least a chunk before the prompt's end), or for a request that is not
        ``strict`` the whole common prefix where it reaches past them.

        NOTE: a prompt that parts from ``held`` among the exact cells resumes
        where the rule says even when it need not be exact: reusing a few more
        cells would save little and leave every cell it decodes inexact, of no use
        to a later reproducible request. With ``reuse_replies`` there is no such
        request, and any common prefix is reused, as llama-server does."""
        total = len(prompt)
        if self.reuse_replies:  # no request is strict: exact cells buy nothing
            return _common(held, prompt, min(len(held), total - 1))
        limit = min(exact, total - 1)
        common = _common(held, prompt, limit)
        resume = self.rule.start(common, total)
        if strict or common < limit:
            return resume
        common = _common(held, prompt, min(len(held), total - 1), common)
        return common if common > exact else resume

    def place(self, prompt: list[int], *, reproducible: bool = True) -> Placement:
        """Choose a free slot for ``prompt`` (there must be one) and mark it busy.

        The slot is the free one holding the longest reusable prefix (ties: the
        least recently used) among those that keep the busy slots' ids as
        consecutive as they can be. When another slot, busy or free, holds a
        longer prefix than the chosen one, its cells are copied over.
        ``reproducible``: see :meth:`strict`.

        NOTE: llama.cpp packs a step's sequences into one forward pass only while
        their ids are consecutive; a request parked in a slot two away from the
        busy ones would split every decode step in two for as long as both run,
        which costs far more than one copy of a slot's cells at admission. With
        nothing busy every slot qualifies, so a conversation keeps its own slot.
        """
        busy = {slot.index for slot in self._slots if slot.busy}
        free = [slot for slot in self._slots if not slot.busy]
        assert free, "place() without a free slot"
        strict = self.strict(reproducible)
        given = {
            slot.index: self.reusable(slot.tokens, slot.exact, prompt, strict)
            for slot in self._slots
        }

        def gives(slot: Slot) -> int:
            return given[slot.index]

        def split(slot: Slot) -> int:
            """How many runs of consecutive busy ids taking ``slot`` adds."""
            return 1 - (slot.index - 1 in busy) - (slot.index + 1 in busy)

        target = min(free, key=lambda s: (split(s), -gives(s), s.last_used))
        reused = gives(target)
        placement = Placement(target.index, reused, exact=min(reused, target.exact), strict=strict)
        others = [slot for slot in self._slots if slot is not target]
        if others:
            donor = max(others, key=gives)
            shared = gives(donor)
            if shared > reused:
                placement = Placement(
                    target.index, shared, donor.index, exact=min(shared, donor.exact), strict=strict
                )
        held = target.tokens
        kept = reused if placement.source == NO_SOURCE else 0
        if len(held) > kept and not any(_starts_with(slot.tokens, held) for slot in others):
            placement.evicted, placement.evicted_exact = held, target.exact
        target.busy = True
        target.settle = strict
        target.tokens, target.exact = [], 0  # until the prompt is decoded, nothing here
        self._touch(target)
        return placement

    def decoded(self, index: int, prompt: list[int], *, reused: int = 0, exact: int = 0) -> None:
        """Slot ``index`` now holds ``prompt``'s cells, decoded after ``reused``
        kept ones of which the first ``exact`` were exact. All but the last few
        are exact when the decode resumed from exact cells where the rule would
        have; else only the exact ones it kept are."""
        slot = self._slots[index]
        slot.tokens = prompt
        rule = self.rule
        exact_start = reused == exact and rule.start(reused, len(prompt)) == reused
        slot.exact = rule.exact_after(len(prompt)) if exact_start else exact

    def release(self, index: int, *, keep: bool, reply: list[int] | None = None) -> None:
        """The slot's request ended; ``keep=False`` when its cells were dropped.
        ``reply`` is what generation steps decoded after the prompt (cells that
        are never exact)."""
        slot = self._slots[index]
        slot.busy = False
        if not keep:
            slot.tokens, slot.exact, slot.settle = [], 0, False
        elif reply:
            slot.tokens = slot.tokens + reply
        self._touch(slot)

    def unsettled(self) -> int | None:
        """The free slot to settle next (the most recently used first): one whose
        last request was strict and whose cells a decode of ``[settle_from, end)``
        the rule's way would leave exact further than they are; ``None``: none."""
        rule = self.rule
        candidates = [
            slot
            for slot in self._slots
            if slot.settle and not slot.busy and rule.exact_after(len(slot.tokens)) > slot.exact
        ]
        if not candidates:
            return None
        return max(candidates, key=lambda s: s.last_used).index

    def settle_from(self, index: int, kept: Kept = _nowhere, *, evict: bool = False) -> SettlePlan:
        """How to settle slot ``index``: from a start the rule chooses among its
        exact cells (a whole chunk or more before the end), into the slot itself,
        or, where that start lies among its exact cells (a settle stopped early
        would drop them), into a copy of it in a spare slot: one that loses
        nothing (see :meth:`spare`), else with ``evict`` the least recently used
        free slot, whose cells the plan names for the engine to save first."""
        slot = self._slots[index]
        start = self.rule.start(slot.exact, len(slot.tokens))
        plan = SettlePlan(slot.tokens, start, index)
        if start >= slot.exact:
            return plan
        spare = self.spare(index, kept)
        if spare is not None:
            plan.into = spare
        elif evict:
            others = [s for s in self._slots if s is not slot and not s.busy]
            if others:
                oldest = min(others, key=lambda s: s.last_used)
                plan.into, plan.evicted, plan.evicted_exact = (
                    oldest.index,
                    oldest.tokens,
                    oldest.exact,
                )
        return plan

    def spare(self, index: int, kept: Kept = _nowhere) -> int | None:
        """A free slot other than ``index`` whose cells can be overwritten losing
        nothing: it holds none, only what another slot holds as exactly, or what
        ``kept`` says is kept elsewhere (the prompt cache); the least recently
        used. ``None``: none."""

        def duplicated(slot: Slot) -> bool:
            return (
                not slot.tokens
                or any(
                    other is not slot
                    and other.exact >= slot.exact
                    and _starts_with(other.tokens, slot.tokens)
                    for other in self._slots
                )
                or kept(slot.tokens, slot.exact)
            )

        spares = [s for s in self._slots if s.index != index and not s.busy and duplicated(s)]
        return min(spares, key=lambda s: s.last_used).index if spares else None

    def settled(self, index: int, reached: int, *, into: int | None = None) -> None:
        """Slot ``index`` was decoded again from :meth:`settle_from`'s start up to
        ``reached``, the rule's way, in slot ``into`` (``index`` itself by default):
        to its end (every cell but the last few exact), or to where it stopped
        early (the cells after were dropped; those before are exact). A spare that
        reached the end holds the conversation from then on (and is its most
        recently used slot); one stopped early holds an exact prefix of it, and
        ``index`` is as it was."""
        slot = self._slots[index]
        slot.settle = False
        tokens = slot.tokens
        target = slot if into is None else self._slots[into]
        if reached >= len(tokens):
            target.tokens, target.exact = tokens, self.rule.exact_after(len(tokens))
            if target is not slot:
                self._touch(target)
        else:
            target.tokens, target.exact = tokens[:reached], reached
        target.settle = False

    def scratch(self) -> int | None:
        """A free slot whose cells may be thrown away (the one holding least),
        for the warm-up decode; ``None`` when all are busy."""
        free = [slot for slot in self._slots if not slot.busy]
        if not free:
            return None
        slot = min(free, key=lambda s: (len(s.tokens), s.last_used))
        slot.tokens, slot.exact, slot.settle = [], 0, False
        return slot.index

    def _touch(self, slot: Slot) -> None:
        self._clock += 1
        slot.last_used = self._clock


def _common(a: list[int], b: list[int], limit: int, start: int = 0) -> int:
    """The length of ``a`` and ``b``'s common prefix, at most ``limit``, given
    that their first ``start`` tokens match (compared a slice at a time first)."""
    n, step = start, 64
    while n + step <= limit and a[n : n + step] == b[n : n + step]:
        n += step
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def _starts_with(tokens: list[int], prefix: list[int]) -> bool:
    return len(tokens) >= len(prefix) and tokens[: len(prefix)] == prefix
