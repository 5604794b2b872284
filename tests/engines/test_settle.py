"""Settling, on the real demo model: while the engine is idle it decodes a greedy
turn's reply again in exact batches, so the conversation's next greedy turn reuses
the reply too and still decodes exactly as it would cold; a request that arrives
meanwhile stops the decode at once (llama.cpp's abort), and the slot keeps only
cells that are exact."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from skulk_core.chat.generation import FinishChunk
from skulk_daemon.engines._llama_exact import EXACT_ROWS
from tests.engines.serving import Served, serve
from tests.engines.test_prefix_reuse import (
    ANSWER,
    SHARED,
    Turn,
    _common,
    _evict,
    _ids,
    _trace,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def settling(demo_gguf: Path) -> Iterator[Served]:
    """An engine of its own per test: one settles the moment it is idle, so a test
    sharing it would find the last one's settle under way."""
    yield from serve(demo_gguf, slots=1, settle_after=0.0)


@pytest.fixture
def settling_spare(demo_gguf: Path) -> Iterator[Served]:
    """Two slots: a settle can decode a copy of a conversation in the other."""
    yield from serve(demo_gguf, slots=2, settle_after=0.0)


@pytest.fixture
def settling_cached(demo_gguf: Path) -> Iterator[Served]:
    """Two slots and a prompt cache: a settle may evict the other slot's history
    into the cache and decode its copy there."""
    yield from serve(demo_gguf, slots=2, settle_after=0.0, prompt_cache_bytes=256 * 1024**2)


COUNTING = ", ".join(str(n) for n in range(1, 50))
"""An unrelated prompt of over a chunk, so the prompt cache keeps its exact cells."""


def _settled(served: Served, before: int) -> int:
    """The engine's settled-token count once it has moved past ``before``."""
    deadline = time.monotonic() + 60
    while (now := served.engine.stats().settled_tokens) == before:
        assert time.monotonic() < deadline, "the engine never settled the slot"
        time.sleep(0.01)
    return now


def test_a_settled_greedy_turn_reuses_its_reply_and_decodes_as_cold(settling: Served) -> None:
    before = settling.engine.stats().settled_tokens
    turn = Turn(settling, "settle-turn-1")
    assert _settled(settling, before) > 0
    # The slot's cells, exact now: the prompt and every reply token decoded (not
    # the last, which max_tokens ended before a step decoded it), but the last rows.
    held = turn.prompt + turn.reply[:-1]
    exact = len(held) - len(held) % EXACT_ROWS
    expected = min(_common(held, turn.following_ids), exact) // EXACT_ROWS * EXACT_ROWS
    assert expected > len(turn.prompt), "the reply does not re-tokenize as it was generated"
    warm, cached = _trace(settling, "settle-turn-2", turn.following)
    assert cached == expected
    _evict(settling, "settle-evict")
    cold, cached = _trace(settling, "settle-cold", turn.following)
    assert cached == 0
    assert warm == cold


FOLLOWING = SHARED + ANSWER
"""A next prompt that shares a turn's prompt, not its reply."""


def _arrives_mid_settle(served: Served, name: str) -> tuple[Turn, list[object], int]:
    """A greedy turn, then a request for :data:`FOLLOWING` that arrives just as
    llama.cpp starts on the settle's first batch (the first asking for no
    logits), which it aborts: the turn, the request's trace and cached tokens."""
    llama = served.engine._llama
    assert llama is not None
    statuses: list[int] = []
    real_decode = llama.decode
    submitted = threading.Event()

    def decode(n_tokens: int) -> int:
        batch = llama.batch
        assert batch is not None
        settling_batch = not any(batch.logits[i] for i in range(n_tokens))
        if settling_batch and not statuses:
            served.submit(f"{name}-next", FOLLOWING, max_tokens=8, logprobs=True, top_logprobs=5)
            submitted.set()
        status = real_decode(n_tokens)
        if settling_batch:
            statuses.append(status)
        return status

    llama.decode = decode  # type: ignore[method-assign]
    try:
        turn = Turn(served, f"{name}-turn-1")
        assert submitted.wait(60), "the engine never settled the slot"
        tokens, end = served.collect(f"{name}-next")
    finally:
        llama.decode = real_decode  # type: ignore[method-assign]
    assert isinstance(end, FinishChunk), end
    assert statuses[0] == 2  # llama.cpp aborted the batch
    warm: list[object] = [(t.token_id, t.logprob, t.top_logprobs) for t in tokens]
    return turn, warm, end.stats.cached_tokens


def test_a_request_during_a_settle_aborts_it_and_decodes_as_cold(settling: Served) -> None:
    turn, warm, cached = _arrives_mid_settle(settling, "abort")
    # The slot kept only exact cells, from before where the settle started.
    assert 0 < cached < len(turn.prompt)
    assert cached % EXACT_ROWS == 0
    _evict(settling, "abort-evict")
    cold, cached = _trace(settling, "abort-cold", FOLLOWING)
    assert cached == 0
    assert warm == cold


def test_a_request_during_a_settle_in_a_spare_slot_finds_the_conversation_whole(
    settling_spare: Served,
) -> None:
    turn, warm, cached = _arrives_mid_settle(settling_spare, "spare")
    # Nothing was lost: the request reuses every exact cell of the prompt it
    # shares, as it would had the engine never begun to settle.
    llama = settling_spare.engine._llama
    assert llama is not None
    exact = len(turn.prompt) - len(turn.prompt) % EXACT_ROWS
    shared = min(_common(turn.prompt, llama.tokenize(FOLLOWING)), exact)
    assert cached == shared // EXACT_ROWS * EXACT_ROWS
    _evict(settling_spare, "spare-evict")  # both slots: the least recently used first
    settling_spare.run("spare-evict-2", "a, b, c, d, e,", max_tokens=2)
    cold, cached = _trace(settling_spare, "spare-cold", FOLLOWING)
    assert cached == 0
    assert warm == cold


def test_a_settle_saves_the_history_it_evicts_to_the_prompt_cache(
    settling_cached: Served,
) -> None:
    served = settling_cached
    other, cached = _ids(served, "cached-other", COUNTING, max_tokens=2)
    assert cached == 0
    before = served.engine.stats()
    turn = Turn(served, "cached-turn-1")  # the other slot: the first holds COUNTING
    _settled(served, before.settled_tokens)
    after = served.engine.stats()
    assert after.prompt_cache is not None and before.prompt_cache is not None
    assert after.prompt_cache.saved == before.prompt_cache.saved + 1  # COUNTING's history
    # The settled copy reuses the reply and decodes as a cold prompt would.
    held = turn.prompt + turn.reply[:-1]
    exact = len(held) - len(held) % EXACT_ROWS
    expected = min(_common(held, turn.following_ids), exact) // EXACT_ROWS * EXACT_ROWS
    warm, cached = _trace(served, "cached-turn-2", turn.following)
    assert cached == expected
    # The evicted history comes back from the cache.
    again, cached = _ids(served, "cached-other-again", COUNTING, max_tokens=2)
    assert cached >= EXACT_ROWS and again == other
    _evict(served, "cached-evict")
    served.engine._scheduler.prompt_cache.clear()
    cold, cached = _trace(served, "cached-cold", turn.following)
    assert cached == 0
    assert warm == cold
