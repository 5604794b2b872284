"""Settling a slot: decoding its inexact cells again the exact way, while idle.

A greedy or seeded request reuses exact cells only (see ``_llama_exact``), and a
reply's cells, written by one-row generation steps, never are: so a greedy
conversation's next turn would prefill its previous reply again. Once the engine
has been idle for a while, :func:`settle` decodes a free slot's cells from where
the exact rule resumes (the reply and the prompt's last rows, from at least a
chunk before the end) to its end again, in the rule's batches, asking for no
logits; then a next greedy turn after a person's pause reuses the reply too, and
still decodes exactly as a cold prompt would.

A request that arrives meanwhile must not wait for this: llama.cpp polls an abort
callback after each graph node, and an aborted ``llama_decode`` drops the cells of
the batch it was computing. Settling starts a chunk before the end, among the
slot's exact cells when the reply is short, and those are dropped before they
are decoded again: so where a spare slot can take it (one that loses nothing,
see :meth:`SlotTable.spare`, or the least recently used once the prompt cache
has saved what it holds), the settle decodes a copy of the slot there instead,
and one stopped early costs the slot nothing. In place, the slot keeps the exact
cells before the stopped batch (see :meth:`SlotTable.settled`).
"""

from __future__ import annotations

from collections.abc import Callable

from ._llama_model import LlamaModel
from ._llama_prompt_cache import PromptCache
from ._llama_slots import SlotTable


def settle(
    llama: LlamaModel,
    slots: SlotTable,
    index: int,
    arrived: Callable[[], bool],
    cache: PromptCache,
) -> tuple[int, int]:
    """Settle slot ``index`` until done or ``arrived()``: the tokens settled and the
    batches decoded. Raises RuntimeError when llama.cpp reports the context unusable."""
    plan = slots.settle_from(index, cache.covers, evict=cache.enabled)
    tokens, start, into = plan.tokens, plan.start, plan.into
    if plan.evicted:
        if arrived():  # saving cannot be stopped; the slot is settled next time
            return 0, 0
        spare, held = plan.into, len(plan.evicted)
        if not cache.keep(
            plan.evicted, plan.evicted_exact, lambda: llama.save_sequence(spare, held)
        ):
            into = index  # the spare's cells would be lost: settle in place
    if arrived():  # nor can copying a slot (the first decode's), nor the trim be undone
        return 0, 0
    ready = llama.trim(index, start) if into == index else llama.keep_prefix(into, start, index)
    if not ready:
        slots.settled(index, 0, into=into)
        return 0, 0
    reached, batches = start, 0
    llama.abort_when(arrived)
    try:
        for n in slots.rule.batches(start, len(tokens)):
            llama.fill_span(tokens, reached, n, into)
            status = llama.decode(n)
            batches += 1
            if status < 0:
                raise RuntimeError(f"llama_decode returned {status}")
            if status > 0:  # aborted (or refused): llama.cpp dropped the batch
                break
            reached += n
            if arrived():
                break
    finally:
        llama.abort_when(None)
    settled = reached - start
    if reached < len(tokens) and not llama.trim(into, reached):
        reached = 0
    slots.settled(index, reached, into=into)
    return settled, batches
