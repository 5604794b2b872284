"""Grammar enforcement for the MLX engine: llguidance token masks as a logits processor.

A request's grammar is the GBNF the llama.cpp path takes (root rule ``root``: a JSON
schema's or a forced tool call's). It is translated to llguidance's Lark dialect and
compiled against the model's own tokenizer; at every step the processor advances the
matcher by the token sampled last and sets every token the grammar forbids to
``-inf``, so the completion cannot leave the grammar (the guarantee llama.cpp's
grammar sampler gives). Once the grammar is complete only end-of-sequence remains.
"""

from __future__ import annotations

import threading
from typing import Any

import mlx.core as mx
import numpy as np
from llguidance import LLMatcher, LLTokenizer
from llguidance.gbnf_to_lark import gbnf_to_lark
from llguidance.hf import from_tokenizer
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask


class GrammarError(ValueError):
    """The grammar cannot be compiled; the message says why."""


class Grammars:
    """Compiles grammars for one model; the llguidance tokenizer is built on first use."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._lltokenizer: LLTokenizer | None = None
        self._lock = threading.Lock()

    def _ll(self) -> LLTokenizer:
        # NOTE: building it reads the whole vocabulary (about a second for Gemma's
        # 262k tokens), so only a node that is asked for a grammar pays for it, once.
        with self._lock:
            if self._lltokenizer is None:
                hf = getattr(self._tokenizer, "_tokenizer", self._tokenizer)
                self._lltokenizer = from_tokenizer(hf, eos_token=self._tokenizer.eos_token_id)
            return self._lltokenizer

    def matcher(self, gbnf: str) -> LLMatcher:
        """A fresh matcher for ``gbnf``; raises :class:`GrammarError`."""
        try:
            lark = gbnf_to_lark(gbnf)
        except Exception as exc:
            raise GrammarError(f"the grammar cannot be translated: {exc}") from None
        matcher = LLMatcher(self._ll(), LLMatcher.grammar_from_lark(lark))
        if matcher.is_error():
            raise GrammarError(f"the grammar is invalid: {matcher.get_error()}")
        return matcher


class GrammarProcessor:
    """The mlx-lm logits processor for one sequence (its own matcher).

    mlx-lm calls it once per sampled position with the token context, whose last
    token is the one fed this step: the prompt's last token the first time, then
    each sampled token in turn."""

    def __init__(self, matcher: LLMatcher) -> None:
        self._matcher = matcher
        self._started = False

    def __call__(self, context: mx.array, logits: mx.array) -> mx.array:
        if self._started:
            self._matcher.consume_token(int(np.asarray(context)[-1]))
        self._started = True
        vocab = logits.shape[-1]
        mask = allocate_token_bitmask(1, vocab)
        fill_next_token_bitmask(self._matcher, mask)
        bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab]
        allowed = mx.array(bits.astype(np.bool_)).reshape(1, vocab)
        return mx.where(allowed, logits, mx.array(-float("inf"), dtype=logits.dtype))
