"""OpenAI Completions request → one :class:`ChatTask` per prompt (``raw``: no template).

A completion is a chat turn whose prompt is sent as written: one user message
holding the text, rendered with no chat template whatever the card. From there it is
the chat path (hooks, admission, routing, batching, prefix reuse, cancellation).
"""

from __future__ import annotations

from typing import Final

import msgspec

from skulk_daemon.chat.admission import MAX_TOP_LOGPROBS
from skulk_daemon.chat.completions_protocol import CompletionRequest
from skulk_daemon.chat.request_types import one_or_many
from skulk_daemon.chat.task import ChatTask, TaskMessage
from skulk_daemon.errors import bad_request, decode_json

MAX_COMPLETION_CHOICES: Final = 16
"""The most choices one request may ask for (prompts times ``n``): each is a sequence
in the runner's batch, and a batch is shared with every other client."""

_decoder = msgspec.json.Decoder(CompletionRequest)


def decode_completion_request(raw: bytes) -> CompletionRequest:
    return decode_json(raw, _decoder)


def prompts(body: CompletionRequest) -> tuple[str, ...]:
    """The request's prompt texts, in choice order; a token-array prompt is refused."""
    if isinstance(body.prompt, str):
        texts: tuple[str, ...] = (body.prompt,)
    elif not body.prompt:
        raise bad_request("prompt must not be an empty list")
    elif all(isinstance(item, str) for item in body.prompt):
        texts = tuple(item for item in body.prompt if isinstance(item, str))
    else:
        raise bad_request(
            "prompt must be a string or a list of strings: token-id prompts are not "
            "accepted, because this node's runners tokenize the text themselves"
        )
    if any(not text for text in texts):
        raise bad_request("prompt must not be empty")
    return texts


def choices_per_prompt(body: CompletionRequest) -> int:
    """``n``, checked (``best_of`` only as ``n``: nothing here ranks candidates)."""
    n = 1 if body.n is None else body.n
    if n < 1:
        raise bad_request("n must be at least 1")
    if body.best_of is not None and body.best_of != n:
        raise bad_request("best_of is not supported: leave it out, or set it equal to n")
    return n


def _check_unsupported(body: CompletionRequest) -> None:
    if body.suffix:
        raise bad_request(
            "suffix is not supported: this node's llama.cpp runner does not fill in the "
            "middle; leave suffix out (or empty) and send the text before the gap as prompt",
            code="unsupported_parameter",
        )
    if body.logit_bias:
        raise bad_request(
            "logit_bias is not supported by this node's runners", code="unsupported_parameter"
        )
    if body.logprobs is not None and not 0 <= body.logprobs <= MAX_TOP_LOGPROBS:
        raise bad_request(f"logprobs must be between 0 and {MAX_TOP_LOGPROBS}")
    if body.echo and body.logprobs is not None:
        raise bad_request(
            "echo with logprobs is not supported: the runner scores the tokens it "
            "generates, not the prompt's",
            code="unsupported_parameter",
        )


def to_tasks(body: CompletionRequest) -> tuple[ChatTask, ...]:
    """One raw task per prompt; every check that needs no model is made here."""
    _check_unsupported(body)
    texts = prompts(body)
    n = choices_per_prompt(body)
    if len(texts) * n > MAX_COMPLETION_CHOICES:
        raise bad_request(
            f"at most {MAX_COMPLETION_CHOICES} choices per request (prompts times n); "
            f"this one asks for {len(texts) * n}"
        )
    return tuple(
        ChatTask(
            model=body.model,
            messages=(TaskMessage(role="user", content=text),),
            raw=True,
            max_tokens=body.max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            min_p=body.min_p,
            seed=body.seed,
            stop=one_or_many(body.stop, str),
            frequency_penalty=body.frequency_penalty,
            presence_penalty=body.presence_penalty,
            repetition_penalty=body.repetition_penalty,
            repetition_context_size=body.repetition_context_size,
            logprobs=body.logprobs is not None,
            top_logprobs=body.logprobs or None,
            include_usage=bool(body.stream_options and body.stream_options.include_usage),
        )
        for text in texts
    )
