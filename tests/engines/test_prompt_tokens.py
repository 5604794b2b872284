"""A prompt tokenized reusing an earlier prompt's prefix gets exactly the tokens
llama.cpp gives the whole text: checked against the demo's real vocabulary (Gemma
3: 6,414 special texts, among them "\\n", "\\n\\n" and runs of spaces) and against a
small reference tokenizer with the partition's rules, where special texts overlap
and one strips the whitespace to its left."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from skulk_daemon.engines._llama_model import plain_tokens, prompt_tokenizer
from skulk_daemon.engines._llama_prompt_tokens import PromptTokens
from tests.engines.demo_model import vocabulary

GEMMA_PIECES = (
    "<start_of_turn>user\n", "<end_of_turn>\n", "<start_of_turn>model\n", "<start_of_turn>",
    "<bos>", "<unused7>", "<start_of", "_turn>", "<", ">", "\n", "\n\n", "\n\n\n", "  ", "\t",
    " ", "the keeper", " lit", " the lamp.", "é", "🍕", "<table>", "</td>", "<unk>", "[multimodal]",
)  # fmt: skip


@pytest.fixture(scope="module")
def vocab(demo_gguf: Path) -> Iterator[object]:
    with vocabulary(demo_gguf) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def reusing(vocab: object) -> PromptTokens:
    tokenizer = prompt_tokenizer(vocab)
    assert isinstance(tokenizer, PromptTokens)  # Gemma's vocabulary is SentencePiece
    return tokenizer


def conversation(turns: int) -> Iterator[str]:
    """A Gemma-templated conversation's prompts, turn by turn."""
    text = "<start_of_turn>user\nYou keep the lighthouse log."
    for turn in range(turns):
        text += f"\n\nEntry {turn}: the wind backed north-west at dusk.<end_of_turn>\n"
        text += "<start_of_turn>model\n"
        yield text
        text += f"Noted entry {turn}; the lamp was lit at 18:{turn:02}.<end_of_turn>\n"
        text += "<start_of_turn>user\n"


def test_a_conversation_tokenizes_only_its_new_turn(vocab: object, reusing: PromptTokens) -> None:
    previous: list[int] = []
    for turn, prompt in enumerate(conversation(8)):
        data = prompt.encode()
        before = reusing.reused_tokens
        tokens = reusing(data)
        assert tokens == plain_tokens(vocab, data)
        if turn:
            # All of the last prompt but its final newline came from the kept prefix.
            assert reusing.reused_tokens - before == len(previous) - 1
        previous = tokens


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 8), st.lists(st.sampled_from(GEMMA_PIECES), max_size=24)),
        min_size=1,
        max_size=6,
    )
)
def test_any_prompts_get_llama_cpp_s_own_tokens(
    vocab: object, reusing: PromptTokens, steps: list[tuple[int, list[str]]]
) -> None:
    """Each prompt continues one of the earlier ones (or starts afresh) with any
    mix of special texts, overlapping ones, whitespace runs and plain text."""
    prompts: list[str] = []
    for base, pieces in steps:
        start = prompts[base % len(prompts)] if prompts and base else ""
        prompt = start + "".join(pieces)
        prompts.append(prompt)
        data = prompt.encode()
        assert reusing(data) == plain_tokens(vocab, data), prompt


# -- the partition's rules, on a reference tokenizer ------------------------------

# NOTE: in this order, as llama.cpp's (unstable) sort by length may leave them:
# "m]!" is searched for before "[m]", as long.
SPECIALS = {
    7: b"m]!", 1: b"<s>", 2: b"\n", 3: b"\n\n", 4: b"<s>x", 5: b"x<s", 6: b"[m]", 8: b"<r>",
    9: b"!<s>x", 10: b"s>ab",
}  # fmt: skip
WHITESPACE = b" \t\n\v\f\r"
PIECES = [b"<s>", b"x", b"<", b"s>", b"\n", b" ", b"\t", b"[m]", b"m]", b"!", b"a", b"ab", b"<r>"]
STRIPPING = {
    "none strip": (frozenset(), frozenset()),
    "[m] strips left": (frozenset({6}), frozenset()),
    "<r> strips right": (frozenset(), frozenset({8})),
    "both": (frozenset({6}), frozenset({8})),
}


def reference_tokens(
    data: bytes, strips_left: frozenset[int], strips_right: frozenset[int]
) -> list[int]:
    """llama.cpp's partition (special texts longest first, leftmost matches, the
    whitespace before a left-stripping one and after a right-stripping one
    dropped), then plain text as two-byte tokens counted from each piece's start:
    a cut inside a piece changes them."""
    fragments: list[bytes | int] = [data]
    for token, text in sorted(SPECIALS.items(), key=lambda item: -len(item[1])):
        split: list[bytes | int] = []
        for fragment in fragments:
            if isinstance(fragment, int):
                split.append(fragment)
                continue
            rest = fragment
            while (at := rest.find(text)) >= 0:
                left = rest[:at].rstrip(WHITESPACE) if token in strips_left else rest[:at]
                split += [left, token] if left else [token]
                rest = rest[at + len(text) :]
                if token in strips_right:
                    rest = rest.lstrip(WHITESPACE)
            if rest:
                split.append(rest)
        fragments = split
    tokens: list[int] = []
    for fragment in fragments:
        if isinstance(fragment, int):
            tokens.append(fragment)
        else:
            tokens += [
                1000 + int.from_bytes(fragment[i : i + 2]) for i in range(0, len(fragment), 2)
            ]
    return tokens


def replay(steps: list[tuple[int, list[bytes]]], stripping: str) -> PromptTokens:
    """Each prompt continues one of the earlier ones (or starts afresh); every one
    gets the reference tokenizer's tokens for the whole text."""
    strips_left, strips_right = STRIPPING[stripping]

    def tokenize(data: bytes) -> list[int]:
        return reference_tokens(data, strips_left, strips_right)

    reusing = PromptTokens(tokenize, SPECIALS, strips_left, strips_right)
    prompts: list[bytes] = []
    for base, pieces in steps:
        start = prompts[base % len(prompts)] if prompts and base else b""
        prompt = start + b"".join(pieces)
        prompts.append(prompt)
        assert reusing(prompt) == tokenize(prompt), prompt
    return reusing


@pytest.mark.parametrize("stripping", STRIPPING)
@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 8), st.lists(st.sampled_from(PIECES), max_size=16)),
        min_size=1,
        max_size=8,
    )
)
# A "\n" that "[m]" strips away, and one that "<r>" does, after a kept " " / "<r> ".
@example(steps=[(0, [b" ", b"\n"]), (1, [b"[m]"])])
@example(steps=[(0, [b"<r>", b" ", b"\n"]), (1, [b"ab"])])
# "\n" learned as a cut from a first prompt, then a fresh one where "<r>" strips the
# whitespace before a "\n" (no earlier prompt of it to have checked the cut on).
@example(steps=[(0, [b"ab", b"\n", b"ab"]), (0, [b"<r>", b" ", b"\n", b"ab"])])
# "\n" then another: "\n\n" (longer, searched first) starts where the cut is.
@example(steps=[(0, [b"ab", b"\n"]), (1, [b"\n"])])
# Kept "!" before "<s>", then "x": "!<s>x" (longer, from before the cut) takes it.
@example(steps=[(0, [b"!", b"<s>"]), (1, [b"x"])])
# Kept "a" before "[m]", then "!": "m]!" (as long, searched first) takes its "m]".
@example(steps=[(0, [b"a", b"[m]"]), (1, [b"!"])])
# Kept "a" before "<s>", then "ab": "s>ab" (longer, from inside it) takes its "s>".
@example(steps=[(0, [b"a", b"<s>"]), (1, [b"ab"])])
def test_the_reference_partition_overlapping_and_stripping_specials(
    stripping: str, steps: list[tuple[int, list[bytes]]]
) -> None:
    replay(steps, stripping)


def test_a_reference_conversation_reuses_its_prefix() -> None:
    """The reference counterpart of the real conversation above, so the property
    test is known to exercise reuse and not only the fallback; and where nothing
    strips, a whitespace special is a cut too."""
    for stripping in STRIPPING:
        turns = [(index, [b"<s>", b"ab", b" ", b"ab"]) for index in range(5)]
        assert replay(turns, stripping).reused_tokens > 0
    lines = [(index, [b"\n", b"ab", b" ", b"ab"]) for index in range(5)]
    assert replay(lines, "none strip").reused_tokens > 0
    assert replay(lines, "both").reused_tokens == 0
