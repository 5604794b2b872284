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
the batch it was computing. The slot then keeps the exact cells before that
batch (see :meth:`SlotTable.settled`).
"""

from __future__ import annotations

from collections.abc import Callable

from ._llama_model import LlamaModel
from ._llama_slots import SlotTable


def settle(
    llama: LlamaModel, slots: SlotTable, index: int, arrived: Callable[[], bool]
) -> tuple[int, int]:
    """Settle slot ``index`` until done or ``arrived()``: the tokens settled and the
    batches decoded. Raises RuntimeError when llama.cpp reports the context unusable."""
    tokens, start = slots.settle_from(index)
    if not llama.trim(index, start):
        slots.settled(index, 0)
        return 0, 0
    reached, batches = start, 0
    llama.abort_when(arrived)
    try:
        for n in slots.rule.batches(start, len(tokens)):
            llama.fill_span(tokens, reached, n, index)
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
    if reached < len(tokens) and not llama.trim(index, reached):
        reached = 0
    slots.settled(index, reached)
    return settled, batches
