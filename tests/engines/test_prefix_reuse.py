"""Prefix reuse in the llama.cpp engine, on the real demo model: a prompt that
starts with what a slot (free or busy) already holds decodes only the rest, and
decodes to exactly what it would cold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skulk_core.chat.generation import FinishChunk
from skulk_daemon.engines._llama_exact import EXACT_ROWS, FLASH_ATTENTION_TILE
from tests.engines.serving import Served, serve

pytestmark = pytest.mark.slow

CHUNK = FLASH_ATTENTION_TILE
SHARED = (
    "The lighthouse stood on a rock at the end of the bay. Every evening the keeper "
    "climbed its two hundred steps, trimmed the wick, polished the great lens and "
    "watched the ships pass on their way to the harbour. In winter the storms came "
    "from the north, and the waves broke over the gallery, and the keeper wrote in "
    "her log the name of every ship she saw, the hour, the wind and the state of "
    "the sea. One morning, after a night of wind, she found a bottle wedged between "
    "two stones below the door. Inside was a letter, folded twice, and it said:"
)
SECRET = " the treasure is buried under the old oak tree by the river, ten paces north."
OTHER = " meet me at the station on Friday at noon, and bring the map."
ANSWER = (
    "\n\nThe keeper read the letter twice by the lamp, then folded it again and put "
    "it in the drawer of her desk, under the log. In the morning she rowed across the "
    "bay to the village, asked the postmaster who had sent a bottle to sea that "
    "winter, and walked up the hill to the last house, where an old sailor sat "
    "mending nets by the door. She said:"
)
"""A next turn's new text: longer than a chunk, so a greedy turn keeps all it can."""


@pytest.fixture(scope="module")
def one_slot(demo_gguf: Path) -> Iterator[Served]:
    yield from serve(demo_gguf, slots=1)


def _ids(served: Served, task: str, prompt: str, max_tokens: int = 12) -> tuple[list[int], int]:
    served.submit(task, prompt, max_tokens=max_tokens)
    tokens, end = served.collect(task)
    assert isinstance(end, FinishChunk), end
    return [t.token_id for t in tokens], end.stats.cached_tokens


def _trace(served: Served, task: str, prompt: str) -> tuple[list[object], int]:
    """The greedy tokens with their log-probabilities and runners-up: equal only
    when the logits are (practically) bit-identical, where equal tokens are not."""
    served.submit(task, prompt, max_tokens=8, logprobs=True, top_logprobs=5)
    tokens, end = served.collect(task)
    assert isinstance(end, FinishChunk), end
    return [(t.token_id, t.logprob, t.top_logprobs) for t in tokens], end.stats.cached_tokens


def _evict(served: Served, task: str) -> None:
    """Run an unrelated prompt, so a one-slot engine holds nothing of the others."""
    served.run(task, "1, 2, 3, 4, 5,", max_tokens=2)


def test_a_reused_prefix_decodes_exactly_like_a_cold_prompt(one_slot: Served) -> None:
    first = SHARED + SECRET
    second = SHARED + OTHER
    _, cached = _ids(one_slot, "first", first)
    assert cached == 0  # nothing held yet

    warm, cached = _ids(one_slot, "second-warm", second)
    assert cached >= CHUNK and cached % EXACT_ROWS == 0

    _evict(one_slot, "evict")
    cold, cached = _ids(one_slot, "second-cold", second)
    assert cached == 0
    assert warm == cold


@pytest.fixture(scope="module")
def one_long_slot(demo_gguf: Path) -> Iterator[Served]:
    yield from serve(demo_gguf, slots=1, context_tokens=1024)


def test_a_prompt_decodes_alike_however_it_is_batched(one_long_slot: Served) -> None:
    # About 630 tokens: cold, the engine decodes [0, 512) and the rest; after a
    # first prompt of about 210 tokens it reuses all but that one's last rows and
    # decodes the other 420 or so as one batch. (A 512-token batch that ends a
    # token short, or a last batch under 64 tokens, fails this: measured.)
    long = " ".join(f"Entry {i}: {SHARED}" for i in range(5))
    _ids(one_long_slot, "long-first", long[: len(long) // 3], max_tokens=2)
    warm, cached = _trace(one_long_slot, "long-warm", long)
    assert cached >= 3 * CHUNK and cached % EXACT_ROWS == 0
    _evict(one_long_slot, "long-evict")
    cold, cached = _trace(one_long_slot, "long-cold", long)
    assert cached == 0
    assert warm == cold


def test_the_same_prompt_again_reuses_all_but_its_last_chunk(one_slot: Served) -> None:
    one_slot.run("again-1", SHARED, max_tokens=4)
    text, end = one_slot.run("again-2", SHARED, max_tokens=4)
    prompt = end.prompt_tokens
    # A chunk is left to decode, from a whole number of rows.
    assert end.stats.cached_tokens == (prompt - CHUNK) // EXACT_ROWS * EXACT_ROWS
    assert end.stats.prompt_tokens == prompt  # the count stays the whole prompt
    _evict(one_slot, "evict-again")
    cold, cold_end = one_slot.run("again-cold", SHARED, max_tokens=4)
    assert cold_end.stats.cached_tokens == 0
    assert text == cold


def test_a_trimmed_slot_never_leaks_the_other_conversation(one_slot: Served) -> None:
    # The slot held SHARED + SECRET; the next prompt shares only SHARED, so
    # whatever the cache gives it must stop before the secret starts.
    one_slot.run("secret", SHARED + SECRET, max_tokens=2)
    question = SHARED + " the"
    warm, end = one_slot.run("question-warm", question, max_tokens=16)
    shared_tokens = one_slot.run("measure", SHARED, max_tokens=1)[1].prompt_tokens
    assert 0 < end.stats.cached_tokens <= shared_tokens
    _evict(one_slot, "evict-leak")
    cold, cold_end = one_slot.run("question-cold", question, max_tokens=16)
    assert cold_end.stats.cached_tokens == 0
    assert warm == cold


def test_a_busy_slots_prefix_is_copied_not_recomputed(served: Served) -> None:
    # Slot 0 is busy generating; the new prompt shares its prefix, so it takes
    # a copy of those cells into the free slot and decodes like a cold prompt.
    served.submit("busy", SHARED + SECRET + " 1, 2, 3,", max_tokens=400)
    served.next_chunk("busy")
    before = served.engine.stats()
    warm, warm_end = served.run("copy-warm", SHARED + OTHER, max_tokens=12)
    after = served.engine.stats()
    assert warm_end.stats.cached_tokens >= CHUNK
    assert after.cached_tokens - before.cached_tokens == warm_end.stats.cached_tokens
    assert warm_end.stats.in_flight_at_admission == 2
    assert warm_end.stats.serving_batches  # it shared decode steps with "busy"
    served.cancel("busy")
    served.collect("busy")

    # Cold: both slots hold something unrelated first.
    served.submit("fill-1", "1, 2, 3, 4, 5,", max_tokens=200)
    served.next_chunk("fill-1")
    served.run("fill-2", "10, 20, 30, 40,", max_tokens=2)
    served.cancel("fill-1")
    served.collect("fill-1")
    served.run("fill-3", "a, b, c, d,", max_tokens=2)
    cold, cold_end = served.run("copy-cold", SHARED + OTHER, max_tokens=12)
    assert cold_end.stats.cached_tokens == 0
    assert warm == cold


def test_a_lone_request_reports_itself_in_flight_and_no_batching(served: Served) -> None:
    _, end = served.run("lone", "Count: one, two, three,", max_tokens=4)
    stats = end.stats
    assert (stats.in_flight_at_admission, stats.max_in_flight_at_admission) == (1, 1)
    assert stats.serving_batches is False


def test_concurrent_requests_report_each_other(served: Served) -> None:
    served.submit("pair-1", "1, 2, 3, 4, 5, 6,", max_tokens=16)
    served.submit("pair-2", "10, 20, 30, 40,", max_tokens=16)
    _, first = served.finish("pair-1")
    _, second = served.finish("pair-2")
    assert sorted(e.stats.in_flight_at_admission for e in (first, second)) == [1, 2]
    assert first.stats.max_in_flight_at_admission == second.stats.max_in_flight_at_admission == 2
    assert first.stats.serving_batches and second.stats.serving_batches


@pytest.fixture(scope="module")
def reusing_replies(demo_gguf: Path) -> Iterator[Served]:
    yield from serve(demo_gguf, slots=1, reuse_replies=True)


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class Turn:
    """One turn's prompt and reply ids, and the next turn's prompt (the turn's
    prompt, its reply and new text) as text and as the engine tokenizes it."""

    def __init__(self, served: Served, task: str, **sampling: Any) -> None:
        served.submit(task, SHARED, max_tokens=8, **sampling)
        tokens, end = served.collect(task)
        assert isinstance(end, FinishChunk), end
        llama = served.engine._llama
        assert llama is not None
        self.prompt = llama.tokenize(SHARED)
        assert end.prompt_tokens == len(self.prompt)
        self.reply = [t.token_id for t in tokens]
        self.following = SHARED + "".join(t.text for t in tokens) + ANSWER
        self.following_ids = llama.tokenize(self.following)


def test_with_reuse_replies_a_conversations_next_turn_reuses_its_reply(
    reusing_replies: Served,
) -> None:
    turn = Turn(reusing_replies, "turn-1")
    # The cells generation steps wrote: every reply token but the last (a reply
    # that ends at max_tokens never decodes its last token).
    held = turn.prompt + turn.reply[:-1]
    expected = min(_common(held, turn.following_ids), len(turn.following_ids) - 1)
    assert expected > len(turn.prompt), "the reply does not re-tokenize as it was generated"
    _, end = reusing_replies.run("turn-2", turn.following, max_tokens=2)
    assert end.stats.cached_tokens == expected
    assert end.stats.prompt_tokens == len(turn.following_ids)  # the whole prompt's count


def test_a_greedy_turn_reuses_its_prompt_not_its_reply_and_decodes_as_cold(
    one_slot: Served,
) -> None:
    turn = Turn(one_slot, "exact-turn-1")
    held = len(turn.prompt)
    assert turn.following_ids[:held] == turn.prompt
    warm, cached = _trace(one_slot, "exact-turn-2", turn.following)
    # All of the first prompt but its last rows; none of the reply's cells.
    assert cached == held - held % EXACT_ROWS
    _evict(one_slot, "evict-exact-turn")
    cold, cached = _trace(one_slot, "exact-turn-cold", turn.following)
    assert cached == 0
    assert warm == cold


# top_k 1 keeps a sampled reply the greedy one (whose re-tokenization is known to
# match); the request still counts as sampled, with no output to reproduce.
SAMPLED = {"temperature": 0.8, "top_k": 1}


def test_a_sampled_turn_reuses_its_reply_and_a_greedy_one_still_decodes_as_cold(
    one_slot: Served,
) -> None:
    turn = Turn(one_slot, "sampled-turn-1", **SAMPLED)
    held = turn.prompt + turn.reply[:-1]
    expected = min(_common(held, turn.following_ids), len(turn.following_ids) - 1)
    assert expected > len(turn.prompt), "the reply does not re-tokenize as it was generated"
    _, end = one_slot.run("sampled-turn-2", turn.following, max_tokens=2, **SAMPLED)
    assert end.stats.cached_tokens == expected
    # The slot now holds cells decoded after a reply's: a greedy request is given
    # only the exact cells before it, and decodes exactly as it would cold.
    warm, end = one_slot.run("greedy-after-sampled", turn.following, max_tokens=12)
    assert 0 < end.stats.cached_tokens <= len(turn.prompt)
    assert end.stats.cached_tokens % EXACT_ROWS == 0
    _evict(one_slot, "evict-sampled")
    cold, end = one_slot.run("greedy-cold", turn.following, max_tokens=12)
    assert end.stats.cached_tokens == 0
    assert warm == cold


def test_a_seeded_turn_reuses_exact_cells_only(one_slot: Served) -> None:
    seeded = {**SAMPLED, "seed": 7}
    turn = Turn(one_slot, "seeded-turn-1", **seeded)
    _, end = one_slot.run("seeded-turn-2", turn.following, max_tokens=2, **seeded)
    assert 0 < end.stats.cached_tokens <= len(turn.prompt)
    assert end.stats.cached_tokens % EXACT_ROWS == 0
