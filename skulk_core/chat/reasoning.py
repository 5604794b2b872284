"""Reasoning text: split a model's thinking from its answer, and resolve the toggles.

Reasoning models write their thinking between ``<think>`` and ``</think>`` (or
``<thinking>`` tags); some chat templates open the block in the prompt itself, so
the completion starts inside it. The splitter routes thinking to
``reasoning_content`` and the rest to ``content``, holding back only text that may
be the start of a tag.

The toggles follow the spec's "Thinking / Reasoning" rules:

- a model with a thinking toggle honours ``enable_thinking``; with both
  ``enable_thinking`` and ``reasoning_effort`` omitted it thinks not at all, and
  ``reasoning_effort="none"`` disables thinking;
- a model without a toggle ignores ``enable_thinking`` but keeps an explicit
  reasoning-effort hint that is not ``none``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from skulk_core.chat.markers import partial_suffix

_TAGS: Final = (("<think>", "</think>"), ("<thinking>", "</thinking>"))

Channel = Literal["reasoning", "content"]


@dataclass(frozen=True, slots=True)
class ThinkingControls:
    """What the chat template is told (``None``: tell it nothing)."""

    enable_thinking: bool | None
    reasoning_effort: str | None


def resolve_thinking(
    *,
    supports_thinking: bool,
    supports_toggle: bool,
    enable_thinking: bool | None,
    reasoning_effort: str | None,
) -> ThinkingControls:
    effort = reasoning_effort.strip().lower() if reasoning_effort else None
    if supports_toggle:
        if effort == "none":
            return ThinkingControls(enable_thinking=False, reasoning_effort=None)
        if enable_thinking is None and effort is None:
            return ThinkingControls(enable_thinking=False, reasoning_effort=None)
        enabled = True if enable_thinking is None else enable_thinking
        effort = effort if enabled else None
        return ThinkingControls(enable_thinking=enabled, reasoning_effort=effort)
    if supports_thinking and effort not in (None, "none"):
        return ThinkingControls(enable_thinking=None, reasoning_effort=effort)
    return ThinkingControls(enable_thinking=None, reasoning_effort=None)


def prompt_opens_thinking(prompt: str) -> bool:
    """Whether the rendered prompt leaves the completion inside a thinking block."""
    tail = prompt.rstrip()
    return any(tail.endswith(opening) for opening, _ in _TAGS)


class ReasoningSplitter:
    """Feed completion text; get ``(channel, text)`` pieces in order.

    ``thinks``: the model is known to think (its card declares it). Only then is
    leading whitespace held until the first word shows whether a tag follows it;
    otherwise it is content at once, so a model that cannot think streams its
    first token as soon as it is sampled (a base model's first token is often a
    bare newline, and holding it cost a whole decode step of time to first
    token). A tag that opens the text is still recognised either way."""

    def __init__(self, *, starts_in_reasoning: bool = False, thinks: bool = True) -> None:
        self._thinks = thinks
        self._buf = ""
        self._close = _TAGS[0][1] if starts_in_reasoning else ""
        self._mode: Literal["start", "reasoning", "content"] = (
            "reasoning" if starts_in_reasoning else "start"
        )
        self._trim_content = False

    def feed(self, text: str) -> list[tuple[Channel, str]]:
        self._buf += text
        out: list[tuple[Channel, str]] = []
        while True:
            piece, progressed = self._step()
            if piece is not None and piece[1]:
                out.append(piece)
            if not progressed:
                return out

    def finish(self) -> list[tuple[Channel, str]]:
        held, self._buf = self._buf, ""
        if not held:
            return []
        channel: Channel = "reasoning" if self._mode == "reasoning" else "content"
        return [(channel, held)]

    def _content(self, text: str) -> tuple[Channel, str]:
        if self._trim_content:
            text = text.lstrip()
            if text:
                self._trim_content = False
        return ("content", text)

    def _step(self) -> tuple[tuple[Channel, str] | None, bool]:
        buf = self._buf
        match self._mode:
            case "start":
                s = buf.lstrip()
                tagged = any(s.startswith(o) or o.startswith(s) for o, _ in _TAGS)
                if not self._thinks and len(s) < len(buf) and tagged:
                    # Whitespace alone, or before what may be a tag: out now.
                    self._buf = s
                    return ("content", buf[: len(buf) - len(s)]), True
                if not s:
                    return None, False
                for opening, closing in _TAGS:
                    if s.startswith(opening):
                        self._buf, self._mode, self._close = s[len(opening) :], "reasoning", closing
                        return None, True
                if any(opening.startswith(s) for opening, _ in _TAGS):
                    return None, False
                self._mode = "content"
                return None, True
            case "reasoning":
                end = buf.find(self._close)
                if end >= 0:
                    self._buf, self._mode = buf[end + len(self._close) :], "content"
                    self._trim_content = True
                    return ("reasoning", buf[:end]), True
                keep = partial_suffix(buf, self._close)
                self._buf = buf[len(buf) - keep :] if keep else ""
                return ("reasoning", buf[: len(buf) - keep]), False
            case "content":
                self._buf = ""
                return (self._content(buf) if buf else None), False
