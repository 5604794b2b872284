"""Which slot a prompt takes, and how much of it the KV cache already holds.

Each slot (a llama.cpp sequence) keeps its KV cells after a request, and this
table remembers the tokens behind them. A new prompt takes the free slot holding
its longest prefix, or a copy of a longer one another slot (free or busy) holds
(see :meth:`SlotTable.place`).

NOTE: only whole prefill chunks are ever reused. llama.cpp's CPU kernels round
differently depending on how a prompt is split into batches (splitting a
600-token prompt into 512 + 88 rather than 64-token pieces moved Gemma 3's
logits by 0.9), so the engine decodes every prompt in batches of whole chunks
from a multiple of ``chunk``, then its partial last chunk (however the whole
chunks are grouped, their cells come out the same), and reuses only whole
chunks: a prompt served from the cache then decodes exactly as it would cold,
and temperature-0 output does not depend on what was served before. Cells a
generation step wrote (an earlier answer) are never reused for the same reason:
they came from a one-row decode.

With ``reuse_replies`` (an operator's opt-in, what llama.cpp's server does)
the table gives up that guarantee for speed: any common prefix is reused, the
cells of a reply included, so a conversation's next turn prefills only its new
text; temperature-0 output may then differ from a cold prompt's.
"""

from __future__ import annotations

from typing import Final

NO_SOURCE: Final = -1


class Slot:
    """One sequence id and the prompt tokens whose cells it still holds."""

    __slots__ = ("busy", "index", "last_used", "tokens")

    def __init__(self, index: int) -> None:
        self.index = index
        self.tokens: list[int] = []
        """Whole prefill chunks of the last prompt decoded here (its cells are kept)."""
        self.last_used = 0
        self.busy = False


class Placement:
    """Where a prompt goes: ``slot``, with its first ``reused`` tokens' cells kept
    (copied from slot ``source`` first, unless that is :data:`NO_SOURCE`).
    ``evicted`` is what the slot held before, when placing the prompt there loses
    some of it and no other slot still holds it all (the engine may save it)."""

    __slots__ = ("evicted", "reused", "slot", "source")

    def __init__(
        self, slot: int, reused: int, source: int = NO_SOURCE, evicted: list[int] | None = None
    ) -> None:
        self.slot = slot
        self.reused = reused
        self.source = source
        self.evicted: list[int] = evicted or []


class SlotTable:
    """The engine's slots; used from its scheduler thread only."""

    def __init__(self, slots: int, chunk: int, *, reuse_replies: bool = False) -> None:
        if chunk < 1:
            raise ValueError(f"the prefill chunk must be positive, got {chunk}")
        self.reuse_replies = reuse_replies
        self.chunk = 1 if reuse_replies else chunk
        """The reuse granule: whole prefill chunks, or any token with ``reuse_replies``."""
        self._slots = [Slot(i) for i in range(slots)]
        self._clock = 0

    def has_free(self) -> bool:
        return any(not slot.busy for slot in self._slots)

    def reusable(self, cached: list[int], prompt: list[int]) -> int:
        """Tokens of ``prompt`` whose cells ``cached`` can give: whole chunks of
        the common prefix, always leaving the last prompt token to decode (its
        logits pick the first token)."""
        chunk = self.chunk
        limit = min(len(cached), len(prompt) - 1)
        limit -= limit % chunk
        n = 0
        while n < limit and cached[n : n + chunk] == prompt[n : n + chunk]:
            n += chunk
        return n

    def place(self, prompt: list[int]) -> Placement:
        """Choose a free slot for ``prompt`` (there must be one) and mark it busy.

        The slot is the free one holding the longest reusable prefix (ties: the
        least recently used) among those that keep the busy slots' ids as
        consecutive as they can be. When another slot, busy or free, holds a
        longer prefix than the chosen one, its cells are copied over.

        NOTE: llama.cpp packs a step's sequences into one forward pass only while
        their ids are consecutive; a request parked in a slot two away from the
        busy ones would split every decode step in two for as long as both run,
        which costs far more than one copy of a slot's cells at admission. With
        nothing busy every slot qualifies, so a conversation keeps its own slot.
        """
        busy = {slot.index for slot in self._slots if slot.busy}
        free = [slot for slot in self._slots if not slot.busy]
        assert free, "place() without a free slot"

        def split(slot: Slot) -> int:
            """How many runs of consecutive busy ids taking ``slot`` adds."""
            return 1 - (slot.index - 1 in busy) - (slot.index + 1 in busy)

        target = min(free, key=lambda s: (split(s), -self.reusable(s.tokens, prompt), s.last_used))
        reused = self.reusable(target.tokens, prompt)
        placement = Placement(target.index, reused)
        others = [slot for slot in self._slots if slot is not target]
        if others:
            donor = max(others, key=lambda s: self.reusable(s.tokens, prompt))
            shared = self.reusable(donor.tokens, prompt)
            if shared > reused:
                placement = Placement(target.index, shared, donor.index)
        held = target.tokens
        kept = reused if placement.source == NO_SOURCE else 0
        if len(held) > kept and not any(_starts_with(slot.tokens, held) for slot in others):
            placement.evicted = held
        target.busy = True
        target.tokens = []  # until the prompt is decoded, nothing here is reusable
        self._touch(target)
        return placement

    def decoded(self, index: int, prompt: list[int]) -> None:
        """Slot ``index`` now holds ``prompt``'s cells (its whole chunks are reusable)."""
        slot = self._slots[index]
        slot.tokens = prompt[: len(prompt) - len(prompt) % self.chunk]

    def release(self, index: int, *, keep: bool, reply: list[int] | None = None) -> None:
        """The slot's request ended; ``keep=False`` when its cells were dropped.
        ``reply`` is what generation steps decoded after the prompt: its cells
        become reusable with ``reuse_replies``."""
        slot = self._slots[index]
        slot.busy = False
        if not keep:
            slot.tokens = []
        elif reply and self.reuse_replies:
            slot.tokens = slot.tokens + reply
        self._touch(slot)

    def scratch(self) -> int | None:
        """A free slot whose cells may be thrown away (the one holding least),
        for the warm-up decode; ``None`` when all are busy."""
        free = [slot for slot in self._slots if not slot.busy]
        if not free:
            return None
        slot = min(free, key=lambda s: (len(s.tokens), s.last_used))
        slot.tokens = []
        return slot.index

    def forget_all(self) -> None:
        for slot in self._slots:
            slot.tokens = []

    def _touch(self, slot: Slot) -> None:
        self._clock += 1
        slot.last_used = self._clock


def _starts_with(tokens: list[int], prefix: list[int]) -> bool:
    return len(tokens) >= len(prefix) and tokens[: len(prefix)] == prefix
