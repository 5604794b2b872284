"""The continuous-batching llama.cpp engine on the real demo model (a base model,
so prompts are completions and decoding is greedy unless a test says otherwise)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from skulk_core.chat.generation import (
    ERROR_CONTEXT_LENGTH_EXCEEDED,
    ERROR_INVALID_REQUEST,
    ErrorChunk,
    FinishChunk,
    TokenChunk,
)
from skulk_daemon.chat.grammars import json_schema_grammar
from tests.engines.demo_model import TEST_CONTEXT_TOKENS
from tests.engines.serving import Served, serve

pytestmark = pytest.mark.slow

ARITHMETIC = "2 + 2 ="
SUMS = " 4\n\n2 + 2 = 4\n\n2 + 2 = 4\n\n2 + 2 = 4"
"""The continuation :data:`SUMS_GRAMMAR` allows, and the only one: tests that read the
text know it by construction, whatever this CPU's greedy rounding would pick."""
SUMS_GRAMMAR = f"root ::= {json.dumps(SUMS)}"
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8,"  # runs on for as long as it is allowed to
# Mathematical Fraktur capitals: byte-fallback tokens, four to a letter.
FRAKTUR = "".join(chr(c) for c in range(0x1D504, 0x1D51D) if c not in (0x1D506, 0x1D50B, 0x1D50C))


def filler(tokens: int) -> str:
    """A prompt of exactly ``tokens`` tokens, BOS included (checked by the callers)."""
    return " a" * (tokens - 1)


def test_a_completion_runs_to_its_token_budget(served: Served) -> None:
    text, end = served.run("sum", ARITHMETIC, max_tokens=4, grammar=SUMS_GRAMMAR)
    assert text and SUMS.startswith(text)
    assert end.finish_reason == "length"
    assert end.completion_tokens == 4


def test_bos_is_added_only_when_the_prompt_lacks_it(served: Served) -> None:
    plain, plain_end = served.run("plain", ARITHMETIC, max_tokens=3)
    rendered, rendered_end = served.run("rendered", "<bos>" + ARITHMETIC, max_tokens=3)
    assert rendered_end.prompt_tokens == plain_end.prompt_tokens
    assert rendered == plain


def test_temperature_zero_repeats_itself(served: Served) -> None:
    served.submit("first", "Once upon a time, there was a", max_tokens=12)
    first, _ = served.collect("first")
    served.submit("second", "Once upon a time, there was a", max_tokens=12)
    second, _ = served.collect("second")
    assert [t.token_id for t in first] == [t.token_id for t in second]
    assert "".join(t.text for t in first) == "".join(t.text for t in second)


def test_stop_string_across_tokens_ends_generation_and_is_never_emitted(
    served: Served,
) -> None:
    served.submit("stop", ARITHMETIC, max_tokens=10, stop=("\n\n2",), grammar=SUMS_GRAMMAR)
    tokens, end = served.collect("stop")
    assert isinstance(end, FinishChunk)
    assert "".join(t.text for t in tokens) == " 4"
    assert end.finish_reason == "stop"
    assert all("\n" not in t.text for t in tokens)
    assert end.completion_tokens == len(tokens) < 10


def test_text_that_only_began_a_stop_string_is_released(served: Served) -> None:
    plain, _ = served.run("plain-near", ARITHMETIC, max_tokens=6, grammar=SUMS_GRAMMAR)
    near, end = served.run(
        "near-miss", ARITHMETIC, max_tokens=6, stop=("\n\nX", "4\n\n2 -"), grammar=SUMS_GRAMMAR
    )
    assert SUMS.startswith(plain) and "4\n\n2 " in plain  # the second stop began, then "+"
    assert near == plain
    assert end.finish_reason == "length"


def test_max_tokens_ends_with_length_after_exactly_that_many(served: Served) -> None:
    served.submit("seven", COUNTING, max_tokens=7)
    tokens, end = served.collect("seven")
    assert isinstance(end, FinishChunk)
    assert end.finish_reason == "length"
    assert len(tokens) == end.completion_tokens == 7


def test_a_prompt_that_fills_the_window_is_refused(served: Served) -> None:
    served.submit("full", filler(TEST_CONTEXT_TOKENS), max_tokens=5)
    tokens, end = served.collect("full")
    assert tokens == []
    assert isinstance(end, ErrorChunk)
    assert end.code == ERROR_CONTEXT_LENGTH_EXCEEDED
    assert end.message.startswith("context_length_exceeded: ")
    assert str(TEST_CONTEXT_TOKENS) in end.message

    served.submit("over", filler(600), max_tokens=5)
    _, end = served.collect("over")
    assert isinstance(end, ErrorChunk)
    assert "600" in end.message


def test_max_tokens_is_clamped_to_the_room_left(served: Served) -> None:
    _, end = served.run("last-cell", filler(TEST_CONTEXT_TOKENS - 1), max_tokens=50)
    assert end.prompt_tokens == TEST_CONTEXT_TOKENS - 1
    assert (end.finish_reason, end.completion_tokens) == ("length", 1)

    _, end = served.run("two-cells", filler(TEST_CONTEXT_TOKENS - 2), max_tokens=50)
    assert (end.finish_reason, end.completion_tokens) == ("length", 2)


def test_strict_max_tokens_that_cannot_fit_is_refused(served: Served) -> None:
    prompt = filler(TEST_CONTEXT_TOKENS - 2)
    served.submit("strict-over", prompt, max_tokens=3, strict_max_tokens=True)
    _, end = served.collect("strict-over")
    assert isinstance(end, ErrorChunk)
    assert end.code == ERROR_CONTEXT_LENGTH_EXCEEDED
    _, fits = served.run("strict-fits", prompt, max_tokens=2, strict_max_tokens=True)
    assert fits.completion_tokens == 2


def test_cancel_frees_the_slot_for_the_next_request(served: Served) -> None:
    served.submit("long-1", COUNTING, max_tokens=400)
    served.submit("long-2", "10, 20, 30, 40,", max_tokens=400)
    served.submit("queued", ARITHMETIC, max_tokens=2, grammar=SUMS_GRAMMAR)
    assert isinstance(served.next_chunk("long-1"), TokenChunk)
    assert isinstance(served.next_chunk("long-2"), TokenChunk)

    served.cancel("long-1")
    _, end = served.collect("long-1")
    assert isinstance(end, FinishChunk)
    assert end.finish_reason == "cancelled"
    assert end.completion_tokens < 400

    text, queued = served.finish("queued")
    assert text and SUMS.startswith(text)
    assert queued.stats.in_flight_at_admission == 2  # itself, and long-2 in the other slot

    served.cancel("long-2")
    _, end = served.collect("long-2")
    assert isinstance(end, FinishChunk)
    assert end.finish_reason == "cancelled"
    assert served.engine.stats().active == 0


def test_cancelling_a_queued_request_never_runs_it(served: Served) -> None:
    served.submit("hold-1", COUNTING, max_tokens=400)
    served.submit("hold-2", COUNTING, max_tokens=400)
    served.submit("never", ARITHMETIC, max_tokens=5)
    assert isinstance(served.next_chunk("hold-2"), TokenChunk)
    served.cancel("never")
    tokens, end = served.collect("never")
    assert tokens == []
    assert isinstance(end, FinishChunk)
    assert (end.finish_reason, end.completion_tokens) == ("cancelled", 0)
    for task in ("hold-1", "hold-2"):
        served.cancel(task)
        _, end = served.collect(task)
        assert isinstance(end, FinishChunk)
        assert end.finish_reason == "cancelled"


def test_concurrent_requests_share_decode_batches_and_match_solo_output(
    served: Served,
) -> None:
    first, second = "The capital of France is", "Once upon a time, there was a"
    solo_first, _ = served.run("solo-1", first, max_tokens=12)
    solo_second, _ = served.run("solo-2", second, max_tokens=12)

    before = served.engine.stats().decode_batches
    served.submit("both-1", first, max_tokens=12)
    served.submit("both-2", second, max_tokens=12)
    text_first, end_first = served.finish("both-1")
    text_second, end_second = served.finish("both-2")
    decodes = served.engine.stats().decode_batches - before

    assert (text_first, text_second) == (solo_first, solo_second)
    admitted = sorted(e.stats.in_flight_at_admission for e in (end_first, end_second))
    assert admitted == [1, 2]
    assert end_first.stats.serving_batches and end_second.stats.serving_batches
    # Run one after the other they would need every decode step to themselves.
    assert decodes < end_first.completion_tokens + end_second.completion_tokens


def test_multibyte_text_round_trips_and_partial_characters_are_held(served: Served) -> None:
    served.submit("fraktur", FRAKTUR, max_tokens=8)
    tokens, end = served.collect("fraktur")
    assert isinstance(end, FinishChunk)
    text = "".join(t.text for t in tokens)
    assert "\ufffd" not in text
    assert any(ord(c) > 0xFFFF for c in text)  # whole 4-byte characters came through
    assert any(t.text == "" for t in tokens)  # while their first bytes were held back

    accented, _ = served.run("accents", "Le café est", max_tokens=12)
    assert "\ufffd" not in accented
    assert any(ord(c) > 0x7F for c in accented)


def test_logprobs_come_from_the_model_distribution(served: Served) -> None:
    served.submit("lp", ARITHMETIC, max_tokens=3, top_logprobs=3)
    tokens, _ = served.collect("lp")
    assert len(tokens) == 3
    for token in tokens:
        assert token.logprob is not None
        assert token.top_logprobs is not None
        assert token.logprob <= 0.0
        values = [value for _, value in token.top_logprobs]
        assert len(values) == 3
        assert values == sorted(values, reverse=True)
        assert values[0] == pytest.approx(token.logprob)  # greedy took the likeliest

    served.submit("no-lp", ARITHMETIC, max_tokens=2)
    plain, _ = served.collect("no-lp")
    assert all(t.logprob is None and t.top_logprobs is None for t in plain)


def test_sampling_parameters_reach_the_sampler(served: Served) -> None:
    greedy, _ = served.run("greedy", "Once upon a time, there was a", max_tokens=10)
    seeded = [
        served.run(
            f"seed-{i}", "Once upon a time, there was a", temperature=1.0, seed=7, max_tokens=10
        )[0]
        for i in range(2)
    ]
    assert seeded[0] == seeded[1]
    # Seeded, so exact cells only: an unseeded sampled request may reuse the
    # cells the seeded ones' replies left, which round differently.
    top_k_1, _ = served.run(
        "top-k", "Once upon a time, there was a", temperature=1.0, top_k=1, seed=1, max_tokens=10
    )
    assert top_k_1 == greedy
    min_p_1, _ = served.run(
        "min-p", "Once upon a time, there was a", temperature=1.0, min_p=1.0, seed=1, max_tokens=10
    )
    assert min_p_1 == greedy

    repeating, _ = served.run("repeat", COUNTING, max_tokens=12)
    penalised, _ = served.run("penalised", COUNTING, max_tokens=12, repetition_penalty=2.0)
    assert penalised != repeating


def test_a_task_id_in_use_is_refused(served: Served) -> None:
    served.submit("twin", COUNTING, max_tokens=300)
    assert isinstance(served.next_chunk("twin"), TokenChunk)
    served.submit("twin", ARITHMETIC, max_tokens=2)  # the same id, while the first runs
    chunk = served.next_chunk("twin")
    while isinstance(chunk, TokenChunk):
        chunk = served.next_chunk("twin")
    assert isinstance(chunk, ErrorChunk)
    assert chunk.code == ERROR_INVALID_REQUEST
    served.cancel("twin")
    _, end = served.collect("twin")
    assert isinstance(end, FinishChunk)
    assert end.finish_reason == "cancelled"


@pytest.fixture
def private_engine(demo_gguf: Path) -> Iterator[Served]:
    yield from serve(demo_gguf, slots=1)


def test_unload_cancels_what_is_in_flight(private_engine: Served) -> None:
    private_engine.submit("running", COUNTING, max_tokens=400)
    private_engine.submit("waiting", COUNTING, max_tokens=400)
    assert isinstance(private_engine.next_chunk("running"), TokenChunk)
    private_engine.engine.unload()
    for task in ("running", "waiting"):
        _, end = private_engine.collect(task)
        assert isinstance(end, FinishChunk)
        assert end.finish_reason == "cancelled"


def test_a_grammar_constrains_every_sampled_token(served: Served) -> None:
    # Unconstrained, the base model continues the count; the grammar allows only
    # two answers, so that is all it can say, greedy or sampled.
    grammar = 'root ::= "yes" | "no"'
    text, end = served.run("g1", "Count: one, two, three,", max_tokens=16, grammar=grammar)
    assert text in ("yes", "no")
    assert end.finish_reason == "stop"
    sampled, _ = served.run(
        "g2", "Is the sky blue?", max_tokens=16, grammar=grammar, temperature=1.0, seed=7
    )
    assert sampled in ("yes", "no")


def test_a_json_schema_grammar_yields_an_object_that_matches_it(served: Served) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    text, end = served.run(
        "g3",
        "The largest city in France",
        max_tokens=48,
        grammar=json_schema_grammar(schema),
    )
    assert end.finish_reason == "stop", text
    value = json.loads(text)
    assert set(value) == {"city", "population"}
    assert isinstance(value["city"], str) and isinstance(value["population"], int)


def test_an_unparsable_grammar_is_refused_and_the_engine_serves_on(served: Served) -> None:
    served.submit("g4", "Hello", max_tokens=4, grammar="root ::= (")
    tokens, end = served.collect("g4")
    assert not tokens
    assert isinstance(end, ErrorChunk) and end.code == "invalid_request"
    text, _ = served.run("g5", "Count: one, two, three,", max_tokens=3)
    assert text
