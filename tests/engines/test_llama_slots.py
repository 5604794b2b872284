"""The engine's slot table: which slot a prompt takes and what of it can be reused
(pure bookkeeping; the engine tests check the cells behind it on the real model)."""

from __future__ import annotations

from skulk_daemon.engines._llama_slots import NO_SOURCE, SlotTable

CHUNK = 4


def tokens(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def test_only_whole_shared_chunks_are_reused_and_the_last_token_is_left() -> None:
    table = SlotTable(1, CHUNK)
    held = tokens(10)  # a 10-token prompt decoded cold: its 8 whole-chunk cells exact

    def strict(prompt: list[int]) -> int:
        return table.reusable(held, 8, prompt, True)

    assert strict(tokens(10)) == 8
    assert strict(tokens(9)) == 8  # 8 of 9: the 9th is decoded
    assert strict(tokens(8)) == 4  # never the whole prompt
    assert strict([*tokens(6), 99, 100, 101]) == 4  # differs inside chunk 2
    assert strict([99, *tokens(9, 1)]) == 0
    assert table.reusable([], 0, tokens(9), True) == 0


def test_a_request_free_to_reuse_anything_takes_the_whole_common_prefix() -> None:
    table = SlotTable(1, CHUNK)
    held = tokens(10)
    assert table.reusable(held, 8, tokens(12), False) == 10
    # Parting among the exact cells: their whole chunks, which keeps what it decodes exact.
    assert table.reusable(held, 8, [*tokens(6), 99, 100], False) == 4
    assert table.reusable(held, 8, [*tokens(9), 99, 100], False) == 9
    assert table.reusable(held, 8, tokens(10), False) == 9  # the last is left to decode


def test_a_slot_keeps_the_whole_chunks_of_its_last_prompt() -> None:
    table = SlotTable(2, CHUNK)
    first = table.place(tokens(10))
    assert (first.slot, first.reused, first.source) == (0, 0, NO_SOURCE)
    table.decoded(0, tokens(10))
    table.release(0, keep=True)
    again = table.place(tokens(14))
    assert (again.slot, again.reused, again.source) == (0, 8, NO_SOURCE)


def test_a_prefix_in_a_busy_slot_is_copied() -> None:
    table = SlotTable(3, CHUNK)
    for slot, start in ((0, 100), (1, 0)):
        placed = table.place(tokens(12, start))
        assert placed.slot == slot
        table.decoded(slot, tokens(12, start))
    table.release(0, keep=True)  # slot 0 free (another prompt); slot 1 busy (ours)
    placed = table.place(tokens(13))
    # Slots 0 and 2 both sit next to the busy one; 2 is the least recently used.
    assert (placed.slot, placed.reused, placed.source) == (2, 12, 1)


def test_with_nothing_busy_a_conversation_keeps_its_own_slot() -> None:
    table = SlotTable(2, CHUNK)
    for slot, start in ((0, 100), (1, 0)):
        table.place(tokens(12, start))
        table.decoded(slot, tokens(12, start))
    table.release(1, keep=True)
    table.release(0, keep=True)
    for _ in range(2):  # the two conversations take turns: neither evicts the other
        for slot, start in ((1, 0), (0, 100)):
            placed = table.place(tokens(13, start))
            assert (placed.slot, placed.reused, placed.source) == (slot, 12, NO_SOURCE)
            table.decoded(slot, tokens(13, start))
            table.release(slot, keep=True)


def test_a_free_slot_that_would_split_the_batch_is_copied_from_instead() -> None:
    table = SlotTable(3, CHUNK)
    table.place(tokens(12, 100))  # slot 0
    table.place(tokens(12, 200))  # slot 1
    table.place(tokens(12))  # slot 2
    for slot, start in ((0, 100), (1, 200), (2, 0)):
        table.decoded(slot, tokens(12, start))
    table.release(1, keep=True)
    table.release(2, keep=True)  # busy: {0}; ours sits in slot 2, away from it
    placed = table.place(tokens(13))
    assert (placed.slot, placed.reused, placed.source) == (1, 12, 2)


def test_a_slot_whose_cells_were_dropped_offers_nothing() -> None:
    table = SlotTable(1, CHUNK)
    table.place(tokens(12))
    table.decoded(0, tokens(12))
    table.release(0, keep=False)
    assert table.place(tokens(12)).reused == 0


def test_with_reuse_replies_any_common_prefix_and_the_reply_are_reusable() -> None:
    table = SlotTable(1, 4, reuse_replies=True)
    prompt = [1, 2, 3, 4, 5, 6]
    placed = table.place(prompt)
    table.decoded(placed.slot, prompt)
    table.release(placed.slot, keep=True, reply=[7, 8])
    # Not a whole chunk: 7 tokens of the 8 the slot holds, the last left to decode.
    assert table.place([1, 2, 3, 4, 5, 6, 7, 9, 10]).reused == 7


def test_a_reproducible_request_never_reuses_a_reply() -> None:
    table = SlotTable(1, 4)
    prompt = [1, 2, 3, 4, 5, 6]
    placed = table.place(prompt)
    table.decoded(placed.slot, prompt)
    table.release(placed.slot, keep=True, reply=[7, 8])
    placed = table.place([1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert (placed.reused, placed.exact, placed.strict) == (4, 4, True)


def test_a_sampled_turn_reuses_its_reply_and_the_slot_keeps_only_what_stays_exact() -> None:
    table = SlotTable(1, 4)
    first = list(range(10))  # decoded cold: [0, 8) exact
    table.place(first, reproducible=False)
    table.decoded(0, first)
    table.release(0, keep=True, reply=[10, 11])
    second = list(range(16))  # the first turn, its reply, then new text
    placed = table.place(second, reproducible=False)
    assert (placed.reused, placed.exact, placed.strict) == (12, 8, False)
    table.decoded(0, second, reused=placed.reused, exact=placed.exact)
    table.release(0, keep=True)
    # What followed the reply's cells is not exact either: a greedy request gets
    # the first turn's whole chunks, a sampled one everything but its last token.
    greedy = table.place(list(range(20)))
    assert (greedy.reused, greedy.exact) == (8, 8)
    table.decoded(0, list(range(20)), reused=8, exact=8)  # an exact start: all exact again
    table.release(0, keep=True)
    assert table.place(list(range(20))).reused == 16


def test_a_sampled_prompt_that_parts_among_exact_cells_keeps_the_slot_exact() -> None:
    table = SlotTable(1, 4)
    table.place(list(range(12)))
    table.decoded(0, list(range(12)))
    table.release(0, keep=True)
    parted = [*range(6), 99, 98, 97, 96]
    placed = table.place(parted, reproducible=False)
    assert (placed.reused, placed.exact) == (4, 4)
    table.decoded(0, parted, reused=4, exact=4)
    table.release(0, keep=True)
    assert table.place([*parted, 1]).reused == 8  # what it decoded is exact too
