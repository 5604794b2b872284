"""Thinking is split from the answer, and the toggles follow the spec's rules."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from skulk_core.chat.reasoning import (
    ReasoningSplitter,
    ThinkingControls,
    prompt_opens_thinking,
    resolve_thinking,
)


def split(pieces: list[str], *, opened: bool = False, thinks: bool = True) -> tuple[str, str]:
    splitter = ReasoningSplitter(starts_in_reasoning=opened, thinks=thinks)
    out = [piece for chunk in pieces for piece in splitter.feed(chunk)] + splitter.finish()
    reasoning = "".join(text for channel, text in out if channel == "reasoning")
    content = "".join(text for channel, text in out if channel == "content")
    return reasoning, content


def test_think_tags_route_thinking_away_from_content() -> None:
    assert split(["<think>", "2+2 is 4", "</think>\n\n", "Four."]) == ("2+2 is 4", "Four.")
    assert split(["<thinking>hmm</thinking>ok"]) == ("hmm", "ok")


def test_a_prompt_that_opens_the_block_starts_in_reasoning() -> None:
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert split(["weighing it", "</think>", "Yes."], opened=True) == ("weighing it", "Yes.")


def test_text_without_tags_is_all_content_and_a_late_tag_is_just_text() -> None:
    assert split(["Hello ", "world"]) == ("", "Hello world")
    assert split(["I said <think> once"]) == ("", "I said <think> once")


def test_an_unclosed_block_stays_reasoning() -> None:
    assert split(["<think>still going"]) == ("still going", "")


@given(st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=30))
def test_splitting_anywhere_gives_the_same_result(sizes: list[int]) -> None:
    text = "  <think>a </thi b</think>\n\nanswer </think> tail"
    pieces = _chunked(text, sizes)
    assert split(pieces) == split([text]) == ("a </thi b", "answer </think> tail")


@given(st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=30))
def test_a_model_that_does_not_think_splits_the_same_way_anywhere(sizes: list[int]) -> None:
    text = "\n\n<think>a </thi b</think>\n\nanswer"
    pieces = _chunked(text, sizes)
    # Its leading newlines are content (sent before the tag could show); the tag is
    # still recognised.
    assert split(pieces, thinks=False) == split([text], thinks=False) == ("a </thi b", "\n\nanswer")


def test_a_leading_newline_is_held_only_for_a_model_that_thinks() -> None:
    """A base model's first token is often a bare newline: held back, it would reach
    the client one decode step later (issue 43's time to first token)."""
    plain = ReasoningSplitter(thinks=False)
    assert plain.feed("\n\n") == [("content", "\n\n")]
    assert plain.feed("Story") == [("content", "Story")]
    thinking = ReasoningSplitter(thinks=True)
    assert thinking.feed("\n\n") == []
    assert thinking.feed("Story") == [("content", "\n\nStory")]
    assert ReasoningSplitter(thinks=False).feed("\n<th") == [("content", "\n")]
    # A token that opens with a space stays one piece.
    assert ReasoningSplitter(thinks=False).feed(" The") == [("content", " The")]


def test_toggleable_models_default_to_not_thinking() -> None:
    def toggle(enable: bool | None, effort: str | None) -> ThinkingControls:
        return resolve_thinking(
            supports_thinking=True,
            supports_toggle=True,
            enable_thinking=enable,
            reasoning_effort=effort,
        )

    assert toggle(None, None) == ThinkingControls(enable_thinking=False, reasoning_effort=None)
    assert toggle(True, None) == ThinkingControls(enable_thinking=True, reasoning_effort=None)
    assert toggle(None, "none").enable_thinking is False
    assert toggle(None, "high") == ThinkingControls(enable_thinking=True, reasoning_effort="high")
    assert toggle(False, "high") == ThinkingControls(enable_thinking=False, reasoning_effort=None)


def test_models_without_a_toggle_ignore_it_but_keep_an_effort_hint() -> None:
    fixed = resolve_thinking(
        supports_thinking=True, supports_toggle=False, enable_thinking=False, reasoning_effort="low"
    )
    assert fixed == ThinkingControls(enable_thinking=None, reasoning_effort="low")
    plain = resolve_thinking(
        supports_thinking=False, supports_toggle=False, enable_thinking=True, reasoning_effort="low"
    )
    assert plain == ThinkingControls(enable_thinking=None, reasoning_effort=None)


def _chunked(text: str, sizes: list[int]) -> list[str]:
    """``text`` cut into pieces of ``sizes`` (the rest, possibly empty, last)."""
    pieces, rest = [], text
    for size in sizes:
        if rest:
            pieces.append(rest[:size])
            rest = rest[size:]
    pieces.append(rest)
    return pieces
