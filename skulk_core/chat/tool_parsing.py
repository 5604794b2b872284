"""Separate tool calls from content in a completion as it streams.

Models write calls in a few shapes: Hermes/Qwen ``<tool_call>{...}</tool_call>``
tags, Mistral's ``[TOOL_CALLS][...]``, Llama's ``<|python_tag|>{...}``, and, for
many families and for Skulk's own tool prompt, a bare JSON object
``{"name": ..., "arguments": {...}}`` (or a list of them), sometimes fenced.

The rules (the spec's "Tool Use"):

- only offered tools come back: a call naming anything else is content;
- a JSON answer stays an answer: text that does not parse as a call to an offered
  tool is content. A prefix is held only while it could still be either, and is
  released the moment it is distinguishable (its first key is not a call key, or
  its ``name`` cannot be an offered tool);
- a call whose arguments do not parse as a JSON object is content, never an error.

Calls are reported when the completion finishes; content is released as it comes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from skulk_core.chat.markers import partial_suffix

TAG_OPEN: Final = "<tool_call>"
TAG_CLOSE: Final = "</tool_call>"
_PREFIX_MARKERS: Final = ("[TOOL_CALLS]", "<|python_tag|>")
_FENCE: Final = "```"
_FENCE_HEADER_LIMIT: Final = 16
_CALL_KEYS: Final = frozenset(
    {"name", "function", "tool_name", "arguments", "parameters", "tool_call", "type", "id"}
)
_KEY: Final = re.compile(r'"((?:[^"\\]|\\.)*)(")?')
_COLON: Final = re.compile(r"\s*:\s*")

Verdict = Literal["wait", "call", "content"]


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str
    """A JSON object, as text."""


def _arguments(value: object) -> str | None:
    if value is None:
        return "{}"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value.strip() else {}
        except ValueError:
            return None
        return json.dumps(parsed, ensure_ascii=False) if isinstance(parsed, dict) else None
    return None


def _call(item: object, names: frozenset[str]) -> ParsedCall | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("tool_call"), dict):
        return _call(item["tool_call"], names)
    name: object = item.get("name", item.get("tool_name"))
    args: object = item.get("arguments", item.get("parameters"))
    function = item.get("function")
    if isinstance(function, dict):
        name = function.get("name")
        args = function.get("arguments", function.get("parameters"))
    elif isinstance(function, str) and name is None:
        name = function
    if not isinstance(name, str) or name not in names:
        return None
    arguments = _arguments(args)
    return None if arguments is None else ParsedCall(name=name, arguments=arguments)


def parse_calls(text: str, names: frozenset[str]) -> list[ParsedCall] | None:
    """Every call in ``text`` (one JSON object or a list of them), or ``None``
    unless all of it is calls to offered tools."""
    try:
        value: Any = json.loads(text)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [_call(item, names) for item in items]
    if not calls or any(call is None for call in calls):
        return None
    return [call for call in calls if call is not None]


def _json_end(text: str) -> int | None:
    """Index just past the first complete JSON object or array in ``text``."""
    depth = 0
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


def _verdict(text: str, names: frozenset[str]) -> Verdict:
    """Could ``text`` (the start of a JSON value) still be a call to an offered tool?"""
    s = text.lstrip()
    if s.startswith("["):
        s = s[1:].lstrip()
    if not s:
        return "wait"
    if s[0] != "{":
        return "content"
    s = s[1:].lstrip()
    if not s:
        return "wait"
    key = _KEY.match(s)
    if key is None:
        return "content"
    if key.group(2) is None:  # the key is still being written
        partial = key.group(1)
        return "wait" if any(k.startswith(partial) for k in _CALL_KEYS) else "content"
    if key.group(1) not in _CALL_KEYS:
        return "content"
    if key.group(1) not in ("name", "tool_name", "function"):
        return "call"
    rest = s[key.end() :]
    colon = _COLON.match(rest)
    if colon is None or colon.end() == len(rest):
        return "wait"
    rest = rest[colon.end() :]
    if rest[0] != '"':
        return "call"  # e.g. "function": {...}
    value = _KEY.match(rest)
    if value is None:
        return "wait"
    if value.group(2) is None:
        return "wait" if any(n.startswith(value.group(1)) for n in names) else "content"
    return "call" if value.group(1) in names else "content"


def _could_start(text: str, marker: str) -> bool:
    return marker.startswith(text)


class ToolCallSieve:
    """Feed completion text in; get content out at once and calls at the end."""

    def __init__(self, names: frozenset[str]) -> None:
        self._names = names
        self._buf = ""
        self._mode: Literal["start", "json", "fence", "tagged", "text"] = "start"
        self._calls: list[ParsedCall] = []
        self._fenced = False

    @property
    def calls(self) -> list[ParsedCall]:
        return list(self._calls)

    def feed(self, text: str) -> str:
        """Add text; return the content that can be released now."""
        self._buf += text
        out: list[str] = []
        while True:
            released, progressed = self._step()
            out.append(released)
            if not progressed:
                return "".join(out)

    def finish(self) -> tuple[str, list[ParsedCall]]:
        """The content still held (anything that never became a call), and the calls."""
        held = self._buf
        if self._mode == "tagged":
            held = TAG_OPEN + held
        self._buf = ""
        self._mode = "text"
        if self._calls and not held.strip():
            held = ""
        return held, list(self._calls)

    def _release(self, text: str) -> tuple[str, bool]:
        self._mode = "text"
        self._buf = ""
        return text, True

    def _step(self) -> tuple[str, bool]:
        """One transition; returns (released content, whether anything changed)."""
        buf = self._buf
        match self._mode:
            case "start":
                s = buf.lstrip()
                if not s:
                    return "", False
                if s.startswith(TAG_OPEN):
                    self._buf, self._mode = s[len(TAG_OPEN) :], "tagged"
                    return "", True
                for marker in _PREFIX_MARKERS:
                    if s.startswith(marker):
                        self._buf, self._mode = s[len(marker) :], "json"
                        return "", True
                if any(_could_start(s, m) for m in (TAG_OPEN, *_PREFIX_MARKERS)):
                    return "", False
                if s.startswith(_FENCE) and not self._fenced:
                    newline = s.find("\n")
                    if newline < 0:
                        return ("", False) if len(s) < _FENCE_HEADER_LIMIT else self._release(buf)
                    header = s[len(_FENCE) : newline].strip().lower()
                    if header not in ("", "json", "tool_call", "tool_code"):
                        return self._release(buf)
                    self._fenced = True
                    self._buf, self._mode = s[newline + 1 :], "json"
                    return "", True
                if _could_start(s, _FENCE) and not self._fenced:
                    return "", False
                if s[0] in "{[":
                    self._mode = "json"
                    return "", True
                return self._release(buf)
            case "json":
                verdict = _verdict(buf, self._names)
                if verdict == "content":
                    return self._release(buf)
                if verdict == "wait":
                    return "", False
                end = _json_end(buf)
                if end is None:
                    return "", False
                calls = parse_calls(buf[:end], self._names)
                if calls is None:
                    return self._release(buf)
                self._calls.extend(calls)
                self._buf, self._mode = buf[end:], "fence" if self._fenced else "start"
                return "", True
            case "fence":
                # A fenced call is parsed; swallow the closing fence when it comes.
                stripped = buf.lstrip()
                if not stripped or (_could_start(stripped, _FENCE) and stripped != _FENCE):
                    return "", False
                if stripped.startswith(_FENCE):
                    stripped = stripped[len(_FENCE) :]
                self._buf, self._mode, self._fenced = stripped, "start", False
                return "", True
            case "tagged":
                close = buf.find(TAG_CLOSE)
                if close < 0:
                    return "", False
                calls = parse_calls(buf[:close].strip(), self._names)
                rest = buf[close + len(TAG_CLOSE) :]
                if calls is None:
                    self._buf, self._mode = rest, "text"
                    return TAG_OPEN + buf[: close + len(TAG_CLOSE)], True
                self._calls.extend(calls)
                self._buf, self._mode = rest, "start"
                return "", True
            case "text":
                start = buf.find(TAG_OPEN)
                if start >= 0:
                    self._buf, self._mode = buf[start + len(TAG_OPEN) :], "tagged"
                    return buf[:start], True
                keep = partial_suffix(buf, TAG_OPEN)
                self._buf = buf[len(buf) - keep :] if keep else ""
                return buf[: len(buf) - keep], False
