"""Shape a turn's events into Ollama's bytes: NDJSON lines or one JSON object.

``/api/chat`` puts text under ``message``; ``/api/generate`` under ``response``
(and ``thinking``). Otherwise the two are the same: one line per delta with
``done: false``, then one ``done: true`` line with the reason, the token counts
and the durations (nanoseconds), or one ``{"error": ...}`` line.

NDJSON has no comment lines, and Ollama's own Python client ``json.loads`` every
line, empty ones included. A keep-alive is therefore a single space: it is sent
at once (so a client that went away is noticed) and becomes leading whitespace
of the next line, which every JSON parser skips.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

import msgspec

from skulk_core.chat.generation import GenerationStats
from skulk_core.chat.tools import ToolCall
from skulk_daemon.chat.generation import KeepAlive
from skulk_daemon.chat.turn import (
    ContentDelta,
    ReasoningDelta,
    TokenLogprob,
    TurnEnd,
    TurnError,
    TurnEvent,
)

log = logging.getLogger(__name__)

NDJSON: Final = "application/x-ndjson"
KEEPALIVE: Final = b" "
NS_PER_SECOND: Final = 1_000_000_000

ReplyKind = Literal["chat", "generate"]
DoneReason = Literal["stop", "length", "load"]

_json = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Reply:
    """What every object of one response shares."""

    kind: ReplyKind
    model: str
    """The model as the client named it (Ollama echoes the request's name)."""
    started_ns: int
    """``time.monotonic_ns()`` when the request arrived, for ``total_duration``."""
    logprobs: bool = False


def created_at() -> str:
    """Now, in RFC 3339 UTC as Ollama writes it."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def line(body: dict[str, object]) -> bytes:
    return _json.encode(body) + b"\n"


def error_object(message: str) -> dict[str, object]:
    return {"error": message}


def load_probe(kind: ReplyKind, model: str, *, unload: bool = False) -> dict[str, object]:
    """The answer to an empty request that only asks for the model to be loaded (or,
    with ``keep_alive: 0``, unloaded)."""
    body = _head(model)
    body.update(_text(kind, "", "", ()))
    body.update({"done": True, "done_reason": "unload" if unload else "load"})
    return body


def _head(model: str) -> dict[str, object]:
    return {"model": model, "created_at": created_at()}


def _logprobs(items: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> list[dict[str, object]]:
    return [
        {
            "token": lp.token,
            "logprob": lp.logprob,
            "bytes": list(lp.token.encode()),
            "top_logprobs": [
                {"token": token, "logprob": value, "bytes": list(token.encode())}
                for token, value in lp.top
            ],
        }
        for lp in items
    ]


def _arguments(call: ToolCall) -> dict[str, object]:
    # The tool parser hands over a JSON object as text; Ollama sends the object.
    try:
        parsed = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        log.warning("tool call %s has non-object arguments; sending {}", call.name)
        return {}
    return parsed


def tool_calls(calls: tuple[ToolCall, ...]) -> list[dict[str, object]]:
    return [
        {
            **({"id": call.id} if call.id else {}),
            "function": {"index": i, "name": call.name, "arguments": _arguments(call)},
        }
        for i, call in enumerate(calls)
    ]


def _text(
    kind: ReplyKind, content: str, thinking: str, calls: tuple[ToolCall, ...]
) -> dict[str, object]:
    if kind == "chat":
        message: dict[str, object] = {"role": "assistant", "content": content}
        if thinking:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = tool_calls(calls)
        return {"message": message}
    body: dict[str, object] = {"response": content}
    if thinking:
        body["thinking"] = thinking
    return body


def durations(stats: GenerationStats, started_ns: int) -> dict[str, int]:
    """Ollama's nanosecond timings, from the engine's throughput figures."""
    # prompt_tps is the rate of the prefill that ran: the cached share took no time.
    prompt_ns = _ns(stats.prompt_tokens - stats.cached_tokens, stats.prompt_tps)
    eval_ns = _ns(stats.generation_tokens, stats.generation_tps)
    return {
        "total_duration": max(time.monotonic_ns() - started_ns, prompt_ns + eval_ns),
        # Skulk loads a model when it is placed, never inside a request.
        "load_duration": 0,
        "prompt_eval_duration": prompt_ns,
        "eval_duration": eval_ns,
    }


def _ns(tokens: int, per_second: float) -> int:
    return int(tokens / per_second * NS_PER_SECOND) if per_second > 0 else 0


def _reason(end: TurnEnd) -> DoneReason:
    # Ollama has no "tool_calls" reason: a turn that called a tool stopped.
    return "length" if end.finish_reason == "length" else "stop"


def final(
    reply: Reply,
    end: TurnEnd,
    *,
    content: str = "",
    thinking: str = "",
    logprobs: list[TokenLogprob] | None = None,
) -> dict[str, object]:
    """The ``done: true`` object (the whole answer when ``content`` is given)."""
    body = _head(reply.model)
    body.update(_text(reply.kind, content, thinking, end.tool_calls))
    body.update(
        {
            "done": True,
            "done_reason": _reason(end),
            **durations(end.stats, reply.started_ns),
            "prompt_eval_count": end.prompt_tokens,
            "eval_count": end.completion_tokens,
        }
    )
    if reply.kind == "generate":
        body["context"] = []
    if logprobs is not None and reply.logprobs:
        body["logprobs"] = _logprobs(logprobs)
    return body


def _delta(reply: Reply, content: str, thinking: str, event: ContentDelta | None) -> bytes:
    body = _head(reply.model)
    body.update(_text(reply.kind, content, thinking, ()))
    body["done"] = False
    if reply.logprobs and event is not None and event.logprobs:
        body["logprobs"] = _logprobs(event.logprobs)
    return line(body)


async def _close(events: AsyncIterator[TurnEvent]) -> None:
    # NOTE: closing the turn's generator closes the generation under it, which
    # cancels the runner's work at once when this response is closed early (a
    # client that went away) rather than whenever the generator is collected.
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


async def ndjson_stream(reply: Reply, events: AsyncIterator[TurnEvent]) -> AsyncIterator[bytes]:
    """One line per delta, then the ``done`` line or an ``error`` line; always one of the two."""
    ended = False
    try:
        async for event in events:
            match event:
                case KeepAlive():
                    yield KEEPALIVE
                case ContentDelta():
                    if event.text or (reply.logprobs and event.logprobs):
                        yield _delta(reply, event.text, "", event)
                case ReasoningDelta():
                    yield _delta(reply, "", event.text, None)
                case TurnEnd():
                    ended = True
                    yield line(final(reply, event))
                    return
                case TurnError():
                    ended = True
                    yield line(error_object(event.message))
                    return
    except Exception:
        log.exception("failed while streaming an Ollama response")
    finally:
        await _close(events)
    if not ended:
        yield line(error_object("generation ended without a result; see the node's log"))


async def json_body(reply: Reply, events: AsyncIterator[TurnEvent]) -> AsyncIterator[bytes]:
    """The whole answer (or an ``error`` object) as one JSON document.

    Spaces while waiting are leading JSON whitespace; they let the server notice a
    client that went away and stop the generation.
    """
    content: list[str] = []
    thinking: list[str] = []
    logprobs: list[TokenLogprob] = []
    try:
        async for event in events:
            match event:
                case KeepAlive():
                    yield KEEPALIVE
                case ContentDelta():
                    content.append(event.text)
                    logprobs.extend(event.logprobs)
                case ReasoningDelta():
                    thinking.append(event.text)
                case TurnEnd():
                    body = final(
                        reply,
                        event,
                        content="".join(content),
                        thinking="".join(thinking),
                        logprobs=logprobs,
                    )
                    yield _json.encode(body)
                    return
                case TurnError():
                    yield _json.encode(error_object(event.message))
                    return
    finally:
        await _close(events)
    yield _json.encode(error_object("generation ended without a result; see the node's log"))
