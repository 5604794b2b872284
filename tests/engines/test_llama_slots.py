"""The engine's slot table: which slot a prompt takes and what of it can be reused
(pure bookkeeping; the engine tests check the cells behind it on the real model)."""

from __future__ import annotations

from skulk_daemon.engines._llama_exact import ExactBatching
from skulk_daemon.engines._llama_slots import NO_SOURCE, SlotTable

# A small rule: exact batches of 8 tokens or more, exact counts in 4s.
RULE = ExactBatching(8, 4, widest=32)


def tokens(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def _cold(table: SlotTable, prompt: list[int]) -> None:
    """Serve ``prompt`` cold in slot 0 and free the slot, which keeps its cells."""
    table.place(prompt)
    table.decoded(0, prompt)
    table.release(0, keep=True)


def test_a_strict_request_reuses_exact_cells_on_whole_rows_leaving_a_chunk() -> None:
    table = SlotTable(1, RULE)
    held = tokens(20)  # a 20-token prompt decoded cold: all 20 cells exact

    def strict(prompt: list[int]) -> int:
        return table.reusable(held, 20, prompt, True)

    assert strict(tokens(30)) == 20
    assert strict(tokens(24)) == 16  # 8 tokens, a chunk, are left to decode
    assert strict(tokens(20)) == 12  # never the whole prompt
    assert strict([*tokens(14), *tokens(16, 100)]) == 12  # parts at 14: whole rows
    assert strict([99, *tokens(29, 1)]) == 0
    assert strict(tokens(7)) == 0  # shorter than a chunk
    assert table.reusable([], 0, tokens(30), True) == 0


def test_a_request_free_to_reuse_anything_takes_the_whole_common_prefix() -> None:
    table = SlotTable(1, RULE)
    held = tokens(22)  # a 20-token prompt, then two reply tokens (not exact)
    assert table.reusable(held, 20, tokens(30), False) == 22
    assert table.reusable(held, 20, tokens(22), False) == 21  # the last is left to decode
    # Parting among the exact cells: where the rule resumes, which keeps what it decodes exact.
    assert table.reusable(held, 20, [*tokens(14), *tokens(16, 100)], False) == 12
    assert table.reusable(held, 20, tokens(20), False) == 12


def test_a_slot_keeps_its_last_prompt_but_the_last_rows() -> None:
    table = SlotTable(2, RULE)
    first = table.place(tokens(18))
    assert (first.slot, first.reused, first.source) == (0, 0, NO_SOURCE)
    table.decoded(0, tokens(18))
    table.release(0, keep=True)
    again = table.place(tokens(40))
    assert (again.slot, again.reused, again.source) == (0, 16, NO_SOURCE)


def test_a_prompt_shorter_than_a_chunk_leaves_nothing_exact() -> None:
    table = SlotTable(1, RULE)
    _cold(table, tokens(6))
    assert table.place(tokens(30)).reused == 0


def test_a_prefix_in_a_busy_slot_is_copied() -> None:
    table = SlotTable(3, RULE)
    for slot, start in ((0, 100), (1, 0)):
        placed = table.place(tokens(20, start))
        assert placed.slot == slot
        table.decoded(slot, tokens(20, start))
    table.release(0, keep=True)  # slot 0 free (another prompt); slot 1 busy (ours)
    placed = table.place(tokens(40))
    # Slots 0 and 2 both sit next to the busy one; 2 is the least recently used.
    assert (placed.slot, placed.reused, placed.source) == (2, 20, 1)


def test_with_nothing_busy_a_conversation_keeps_its_own_slot() -> None:
    table = SlotTable(2, RULE)
    for slot, start in ((0, 100), (1, 0)):
        table.place(tokens(20, start))
        table.decoded(slot, tokens(20, start))
    table.release(1, keep=True)
    table.release(0, keep=True)
    for held in (20, 40):  # the two conversations take turns: neither evicts the other
        for slot, start in ((1, 0), (0, 100)):
            placed = table.place(tokens(held + 20, start))
            assert (placed.slot, placed.reused, placed.source) == (slot, held, NO_SOURCE)
            table.decoded(slot, tokens(held + 20, start))
            table.release(slot, keep=True)


def test_a_free_slot_that_would_split_the_batch_is_copied_from_instead() -> None:
    table = SlotTable(3, RULE)
    table.place(tokens(20, 100))  # slot 0
    table.place(tokens(20, 200))  # slot 1
    table.place(tokens(20))  # slot 2
    for slot, start in ((0, 100), (1, 200), (2, 0)):
        table.decoded(slot, tokens(20, start))
    table.release(1, keep=True)
    table.release(2, keep=True)  # busy: {0}; ours sits in slot 2, away from it
    placed = table.place(tokens(40))
    assert (placed.slot, placed.reused, placed.source) == (1, 20, 2)


def test_a_slot_whose_cells_were_dropped_offers_nothing() -> None:
    table = SlotTable(1, RULE)
    table.place(tokens(20))
    table.decoded(0, tokens(20))
    table.release(0, keep=False)
    assert table.place(tokens(40)).reused == 0


def test_with_reuse_replies_any_common_prefix_and_the_reply_are_reusable() -> None:
    table = SlotTable(1, RULE, reuse_replies=True)
    placed = table.place(tokens(18))
    table.decoded(placed.slot, tokens(18))
    table.release(placed.slot, keep=True, reply=[18, 19])
    # Past the 16 exact cells: 19 of the 20 the slot holds, then it parts.
    assert table.place([*tokens(19), *tokens(10, 100)]).reused == 19


def test_with_reuse_replies_a_short_repeated_prompt_is_reused_however_short() -> None:
    # A prompt shorter than a chunk (no exact cells at all; the demo's chunk is 64,
    # so a 22-token chat prompt) sent again reuses all but its last token, as
    # llama-server does; in bit-exact mode it decodes cold every time.
    short = tokens(6)
    for reuse, expected in ((True, 5), (False, 0)):
        table = SlotTable(1, RULE, reuse_replies=reuse)
        placed = table.place(short)
        table.decoded(placed.slot, short)
        table.release(placed.slot, keep=True, reply=[5, 6])
        assert table.place(short).reused == expected


def test_with_reuse_replies_a_prompt_parting_among_exact_cells_keeps_its_whole_prefix() -> None:
    table = SlotTable(1, RULE, reuse_replies=True)
    placed = table.place(tokens(40))
    table.decoded(placed.slot, tokens(40))
    table.release(placed.slot, keep=True)
    # Parts at 27: every common cell is reused, not cut back to the rule's rows.
    assert table.place([*tokens(27), *tokens(30, 100)]).reused == 27


def test_a_reproducible_request_never_reuses_a_reply() -> None:
    table = SlotTable(1, RULE)
    placed = table.place(tokens(18))
    table.decoded(placed.slot, tokens(18))
    table.release(placed.slot, keep=True, reply=[18, 19])
    placed = table.place(tokens(40))
    assert (placed.reused, placed.exact, placed.strict) == (16, 16, True)


def test_a_sampled_turn_reuses_its_reply_and_the_slot_keeps_only_what_stays_exact() -> None:
    table = SlotTable(1, RULE)
    table.place(tokens(18), reproducible=False)
    table.decoded(0, tokens(18))  # decoded cold: [0, 16) exact
    table.release(0, keep=True, reply=[18, 19])
    second = tokens(40)  # the first turn, its reply, then new text
    placed = table.place(second, reproducible=False)
    assert (placed.reused, placed.exact, placed.strict) == (20, 16, False)
    table.decoded(0, second, reused=placed.reused, exact=placed.exact)
    table.release(0, keep=True)
    # What followed the reply's cells is not exact either: a greedy request gets
    # the first turn's exact cells, a sampled one everything but its last token.
    greedy = table.place(tokens(50))
    assert (greedy.reused, greedy.exact) == (16, 16)
    table.decoded(0, tokens(50), reused=16, exact=16)  # an exact start: exact again
    table.release(0, keep=True)
    assert table.place(tokens(60)).reused == 48


def test_cells_decoded_from_off_the_rule_are_not_counted_exact() -> None:
    table = SlotTable(1, RULE)
    _cold(table, tokens(20))
    # Had 20 of 24 been reused (the rule resumes at 16), 4 tokens would have been
    # decoded in a batch under a chunk.
    table.decoded(0, tokens(24), reused=20, exact=20)
    table.release(0, keep=True)
    assert table.place(tokens(40)).reused == 20


def test_a_sampled_prompt_that_parts_among_exact_cells_keeps_the_slot_exact() -> None:
    table = SlotTable(1, RULE)
    _cold(table, tokens(24))
    parted = [*tokens(14), *tokens(16, 100)]
    placed = table.place(parted, reproducible=False)
    assert (placed.reused, placed.exact) == (12, 12)
    table.decoded(0, parted, reused=12, exact=12)
    table.release(0, keep=True)
    assert table.place([*parted, *tokens(10, 200)]).reused == 28  # what it decoded is exact


def _turn(table: SlotTable, prompt: list[int], reply: list[int], *, strict: bool) -> int:
    """Serve ``prompt`` (reusing what the table gives) and release it with ``reply``."""
    placed = table.place(prompt, reproducible=strict)
    table.decoded(placed.slot, prompt, reused=placed.reused, exact=placed.exact)
    table.release(placed.slot, keep=True, reply=reply)
    return placed.slot


def test_a_strict_turns_reply_is_settled_from_a_chunk_before_its_end() -> None:
    table = SlotTable(1, RULE)
    _turn(table, tokens(18), tokens(5, 100), strict=True)  # 16 exact, then 2 + 5 not
    assert table.unsettled() == 0
    plan = table.settle_from(0, evict=True)
    held = plan.tokens
    assert held == [*tokens(18), *tokens(5, 100)]
    assert plan.start == 12  # a multiple of 4, a chunk (8) or more before the end (23)
    assert plan.into == 0  # no other slot to decode a copy in
    table.settled(0, len(held))
    assert table.unsettled() is None
    # The next strict turn reuses the reply: all 23 cells but the last 23 % 4.
    following = [*held, *tokens(12, 200)]
    assert table.place(following).reused == 20


def test_a_settle_stopped_early_keeps_only_the_exact_cells_before_it() -> None:
    table = SlotTable(1, RULE)
    _turn(table, tokens(18), tokens(30, 100), strict=True)
    plan = table.settle_from(0)
    held, start = plan.tokens, plan.start
    assert plan.into == 0
    table.settled(0, start + 8)  # one batch of two, then a request came
    assert table.unsettled() is None
    assert table.reusable(held[: start + 8], start + 8, [*held, 1], True) == start + 8
    assert table.place([*held, 1]).reused == start + 8


def test_a_short_reply_settles_in_a_spare_slot_so_stopping_early_costs_nothing() -> None:
    table = SlotTable(2, RULE)
    _turn(table, tokens(18), tokens(5, 100), strict=True)  # 16 exact, then 2 + 5 not
    plan = table.settle_from(0)
    held = plan.tokens
    assert (plan.start, plan.into) == (12, 1)  # 12 < 16: the settle would drop exact cells
    table.settled(0, plan.start, into=plan.into)  # a request came during the first batch
    # The conversation's slot still holds its 16 exact cells, and the spare an
    # exact prefix of them (the 12 the copy kept).
    following = [*held, *tokens(12, 200)]
    placed = table.place(following)
    assert (placed.slot, placed.reused) == (0, 16)
    table.decoded(placed.slot, following, reused=placed.reused, exact=placed.exact)
    table.release(placed.slot, keep=True, reply=tokens(3, 300))
    # A settle that reaches the end leaves the conversation in the spare, exact
    # to the end; the next strict turn goes there.
    plan = table.settle_from(0)
    held = plan.tokens
    assert plan.into == 1
    table.settled(0, len(held), into=plan.into)
    assert table.unsettled() is None
    placed = table.place([*held, *tokens(12, 400)])
    assert (placed.slot, placed.reused) == (1, len(held) - len(held) % 4)


def test_a_spare_slot_is_one_whose_cells_another_holds_as_exactly() -> None:
    table = SlotTable(3, RULE)
    first = _turn(table, tokens(18), tokens(5, 100), strict=True)
    other = _turn(table, tokens(18, 500), tokens(5, 600), strict=True)
    empty = ({0, 1, 2} - {first, other}).pop()
    assert table.spare(first) == empty
    table.settled(other, table.settle_from(other).start, into=empty)  # a copy, stopped
    assert table.spare(first) == empty  # it holds what `other` holds
    table.settled(other, len(table.settle_from(other).tokens), into=empty)
    # Now the copy is the exact one: `other` is the spare, and a conversation
    # held nowhere else never is.
    assert table.spare(first) == other
    assert table.spare(other) is None


def test_with_every_other_slot_holding_a_conversation_a_settle_evicts_the_oldest() -> None:
    table = SlotTable(3, RULE)
    oldest = _turn(table, tokens(18, 500), tokens(5, 600), strict=False)
    newer = _turn(table, tokens(18, 700), tokens(5, 800), strict=False)
    settling = _turn(table, tokens(18), tokens(5, 100), strict=True)
    assert table.settle_from(settling).into == settling  # nothing free to lose
    # What the prompt cache keeps is free to lose.
    kept = table.settle_from(settling, lambda held, _exact: held[0] == 700)
    assert (kept.into, kept.evicted) == (newer, [])
    # With a prompt cache to save it in, the least recently used slot is evicted.
    plan = table.settle_from(settling, evict=True)
    assert plan.into == oldest
    assert (plan.evicted, plan.evicted_exact) == ([*tokens(18, 500), *tokens(5, 600)], 16)
    table.settled(settling, len(plan.tokens), into=plan.into)
    placed = table.place([*plan.tokens, *tokens(12, 900)])
    assert (placed.slot, placed.reused) == (oldest, 20)


def test_only_strict_turns_with_inexact_cells_are_settled_most_recent_first() -> None:
    table = SlotTable(4, RULE)
    _turn(table, tokens(18), tokens(5, 100), strict=False)  # sampled: reuses replies anyway
    assert table.unsettled() is None
    _turn(table, tokens(20, 300), [], strict=True)  # 20 tokens, all exact: nothing to gain
    assert table.unsettled() is None
    first = _turn(table, tokens(18, 500), tokens(3, 600), strict=True)
    second = _turn(table, tokens(18, 700), tokens(3, 800), strict=True)
    assert len({first, second}) == 2
    assert table.unsettled() == second
    table.settled(second, len(table.settle_from(second).tokens))
    assert table.unsettled() == first
    busy = table.place([*tokens(18, 500), *tokens(3, 600), 1])  # its next turn
    assert busy.slot == first
    assert table.unsettled() is None  # a busy slot is never settled
    table.release(first, keep=False)  # a failed decode dropped its cells
    assert table.unsettled() is None


def test_with_reuse_replies_nothing_is_settled() -> None:
    table = SlotTable(1, RULE, reuse_replies=True)  # greedy turns reuse replies anyway
    _turn(table, tokens(18), tokens(5, 100), strict=True)
    assert table.unsettled() is None
