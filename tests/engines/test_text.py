"""Streaming detokenization: what a client sees for any split of the bytes."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from skulk_daemon.engines._text import TextStream


def stream(pieces: list[bytes], stops: tuple[str, ...]) -> tuple[list[str], bool]:
    """Feed pieces until a stop; flush at the end like a finished generation."""
    text = TextStream(stops)
    out: list[str] = []
    for piece in pieces:
        released, stopped = text.push(piece)
        out.append(released)
        if stopped:
            return out, True
    out.append(text.flush())
    return out, False


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def test_a_character_split_across_tokens_is_released_whole() -> None:
    emoji = "🍕".encode()
    out, _ = stream([emoji[:1], emoji[1:3], emoji[3:], b" ok"], ())
    assert out == ["", "", "🍕", " ok", ""]


def test_the_stop_string_is_cut_out_even_mid_token() -> None:
    out, stopped = stream([b"The answer", b" is 4.", b"\nUser", b": more"], ("\nUser:",))
    assert stopped
    assert "".join(out) == "The answer is 4."
    assert out[2] == ""  # "\nUser" could still have been the stop: held


def test_the_stop_string_completed_first_wins() -> None:
    out, stopped = stream([b"a END b STOP"], ("STOP", "END"))
    assert stopped
    assert "".join(out) == "a "
    # "b" completes before "abc" would: generation ends there, however it was split.
    for pieces in ([b"abc"], [b"ab", b"c"], [b"a", b"b", b"c"]):
        out, _ = stream(pieces, ("abc", "b"))
        assert "".join(out) == "a"


def reference(text: str, stops: list[str]) -> tuple[str, bool]:
    """Character by character: stop where the first stop string completes."""
    for end in range(1, len(text) + 1):
        done = [s for s in stops if s and text[:end].endswith(s)]
        if done:
            return text[: end - max(len(s) for s in done)], True
    return text, False


def test_held_text_is_released_when_the_stop_does_not_follow() -> None:
    out, stopped = stream([b"x <", b"/", b"b> y"], ("</s>",))
    assert not stopped
    assert out == ["x ", "", "</b> y", ""]


def test_an_unfinished_character_at_the_end_becomes_a_replacement() -> None:
    out, _ = stream(["é".encode()[:1]], ())
    assert "".join(out) == "\ufffd"


def test_empty_stop_strings_are_ignored() -> None:
    out, stopped = stream([b"abc"], ("",))
    assert (out, stopped) == (["abc", ""], False)


@given(
    text=st.text(alphabet=st.sampled_from("ab </é🍕\n"), max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    stops=st.lists(st.text(alphabet=st.sampled_from("ab </é🍕\n"), max_size=4), max_size=3),
)
def test_any_split_yields_the_text_up_to_the_first_stop(
    text: str, cuts: list[int], stops: list[str]
) -> None:
    out, stopped = stream(split(text.encode(), cuts), tuple(stops))
    assert ("".join(out), stopped) == reference(text, stops)
