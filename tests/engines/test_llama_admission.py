"""The llama.cpp engine's admission decisions that need no model: how many tokens a
prompt leaves a request, and which requests must reuse exact cells only."""

from __future__ import annotations

from skulk_core.chat.generation import ERROR_CONTEXT_LENGTH_EXCEEDED, SamplingParams
from skulk_daemon.engines._llama_scheduler import reproducible
from skulk_daemon.engines._llama_sequences import token_budget


def test_max_tokens_is_the_budget_while_it_fits() -> None:
    assert token_budget(10, 5, False, 64) == 5
    assert token_budget(10, 54, True, 64) == 54


def test_the_budget_is_clamped_to_the_room_left() -> None:
    assert token_budget(60, 100, False, 64) == 4


def test_a_prompt_that_leaves_no_room_is_refused() -> None:
    refusal = token_budget(64, 1, False, 64)
    assert isinstance(refusal, str)
    assert refusal.startswith(ERROR_CONTEXT_LENGTH_EXCEEDED)
    assert "leaves no room to generate" in refusal
    assert "64-token context window" in refusal


def test_a_strict_max_tokens_past_the_room_is_refused() -> None:
    refusal = token_budget(60, 5, True, 64)
    assert isinstance(refusal, str)
    assert "max_tokens is 5" in refusal
    assert token_budget(60, 4, True, 64) == 4


def test_greedy_and_seeded_requests_are_reproducible() -> None:
    assert reproducible(SamplingParams(max_tokens=1, temperature=0.0))
    assert reproducible(SamplingParams(max_tokens=1, temperature=0.8, seed=7))
    assert not reproducible(SamplingParams(max_tokens=1, temperature=0.8))
