"""llama.cpp sampler chains and logprobs for one sequence.

Each sequence owns its chain, so a seeded request draws the same tokens whether
it is decoded alone or batched with others.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from typing import Final

import llama_cpp
import numpy as np

from skulk_core.chat.generation import SamplingParams

MAX_TOP_LOGPROBS: Final = 20
"""OpenAI's bound on ``top_logprobs``."""

SamplerHandle = object
"""An owned ``llama_sampler *``; free it with :func:`free_chain`."""


def _penalised(params: SamplingParams) -> bool:
    return (
        params.repetition_penalty != 1.0
        or params.frequency_penalty != 0.0
        or params.presence_penalty != 0.0
    )


def is_plain_greedy(params: SamplingParams) -> bool:
    """Greedy with nothing that reshapes the logits: an argmax will do."""
    return params.temperature <= 0.0 and not _penalised(params) and params.grammar is None


class GrammarError(ValueError):
    """llama.cpp could not parse a request's grammar."""


def grammar_sampler(vocab: object, grammar: str) -> SamplerHandle:
    """A grammar-constraining sampler; raises :class:`GrammarError` when llama.cpp
    refuses the grammar (it returns NULL and logs the parse error)."""
    handle = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    if not handle:
        raise GrammarError("the grammar could not be parsed")
    return handle


def check_grammar(vocab: object, grammar: str) -> None:
    """Raise :class:`GrammarError` unless llama.cpp accepts ``grammar``."""
    llama_cpp.llama_sampler_free(grammar_sampler(vocab, grammar))


def argmax(logits: np.ndarray) -> int:
    """The likeliest token, straight from the logits.

    llama.cpp's greedy sampler first copies the whole vocabulary into a
    candidates array (262k entries for Gemma 3: measured 0.56 ms a token on
    the CI box); a numpy argmax over the same floats took 0.09 ms and picks
    the same token (the first maximum, as llama.cpp does)."""
    return int(logits.argmax())


def build_chain(n_vocab: int, params: SamplingParams, prompt: Sequence[int]) -> SamplerHandle:
    """The chain llama.cpp's own defaults would build: penalties, top-k, top-p,
    min-p, temperature, then a seeded draw (or greedy at temperature 0). A
    grammar is not part of it: see :func:`sample_constrained`."""
    chain_params = llama_cpp.llama_sampler_chain_default_params()
    chain_params.no_perf = True
    chain = llama_cpp.llama_sampler_chain_init(chain_params)
    if _penalised(params):
        penalties = llama_cpp.llama_sampler_init_penalties(
            n_vocab,
            params.repetition_context_size,
            params.repetition_penalty,
            params.frequency_penalty,
            params.presence_penalty,
        )
        if params.repetition_context_size > 0:
            # Repetition is judged over the recent context, prompt included (as
            # mlx-lm's repetition_context_size does), not just what we generated.
            for token in prompt[-params.repetition_context_size :]:
                llama_cpp.llama_sampler_accept(penalties, token)
        llama_cpp.llama_sampler_chain_add(chain, penalties)
    if params.temperature <= 0.0:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
    else:
        if params.top_k > 0:
            llama_cpp.llama_sampler_chain_add(
                chain, llama_cpp.llama_sampler_init_top_k(params.top_k)
            )
        if params.top_p < 1.0:
            llama_cpp.llama_sampler_chain_add(
                chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1)
            )
        if params.min_p > 0.0:
            llama_cpp.llama_sampler_chain_add(
                chain, llama_cpp.llama_sampler_init_min_p(params.min_p, 1)
            )
        llama_cpp.llama_sampler_chain_add(
            chain, llama_cpp.llama_sampler_init_temp(params.temperature)
        )
        seed = llama_cpp.LLAMA_DEFAULT_SEED if params.seed is None else params.seed & 0xFFFFFFFF
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed))
    return chain


def free_chain(chain: SamplerHandle) -> None:
    llama_cpp.llama_sampler_free(chain)


_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
_PREFILTERS: Final = (4096, 32768)
"""Candidate counts offered to the grammar, likeliest first, before the whole
vocabulary (masking all of Gemma's 262k tokens takes 35-185 ms; 4096, about 5 ms)."""


def _token_array(
    logits: np.ndarray, ids: np.ndarray
) -> tuple[np.ndarray, llama_cpp.llama_token_data_array]:
    data = np.empty(len(ids), dtype=_TOKEN_DATA)
    data["id"] = ids
    data["logit"] = logits[ids]
    data["p"] = 0.0
    array = llama_cpp.llama_token_data_array(
        data=data.ctypes.data_as(llama_cpp.llama_token_data_p),
        size=len(ids),
        selected=-1,
        sorted=False,
    )
    return data, array


def _allowed(grammar: SamplerHandle, logits: np.ndarray, token: int) -> bool:
    data, array = _token_array(logits, np.array([token], dtype=np.int32))
    llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
    return bool(np.isfinite(data["logit"][0]))


def sample_constrained(
    chain: SamplerHandle,
    grammar: SamplerHandle,
    params: SamplingParams,
    *,
    logits: np.ndarray,
    ctx: object,
    index: int,
) -> int:
    """Sample one token the grammar allows.

    Checking every token of a 262k vocabulary against a grammar costs seconds a
    step, so this does what llama.cpp's own common sampler does: draw the token the
    unconstrained chain would pick and keep it if the grammar allows it (the usual
    case); otherwise mask the likeliest candidates (then, if none fits, the whole
    vocabulary) with the grammar and draw from what is left. Greedy decoding picks
    the same token either way: the likeliest allowed one.
    """
    n_vocab = len(logits)
    if not _penalised(params):
        # NOTE: with penalties the chain remembers what it drew, so a rejected draw
        # would skew them; those requests always take the masked path.
        if params.temperature <= 0.0:
            token = int(logits.argmax())
        else:
            token = int(llama_cpp.llama_sampler_sample(chain, ctx, index))
        if _allowed(grammar, logits, token):
            llama_cpp.llama_sampler_accept(grammar, token)
            return token
    tiers = [np.argpartition(logits, -k)[-k:] for k in _PREFILTERS if k < n_vocab]
    for ids in (*tiers, np.arange(n_vocab)):
        data, array = _token_array(logits, ids.astype(np.int32))
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
        if np.isneginf(data["logit"]).all():
            continue
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(array))
        token = int(array.data[array.selected].id)
        llama_cpp.llama_sampler_accept(chain, token)
        llama_cpp.llama_sampler_accept(grammar, token)
        return token
    raise GrammarError("the grammar allows no token here")


def logprobs(
    logits: np.ndarray,
    token: int,
    top_n: int,
    piece_text: Callable[[int], str],
) -> tuple[float, list[tuple[str, float]] | None]:
    """The sampled token's log-probability under the model's raw distribution,
    and the ``top_n`` most likely alternatives. Only called when asked for: it
    touches the whole vocabulary."""
    peak = float(logits.max())
    log_norm = peak + math.log(float(np.exp(logits - peak).sum()))
    chosen = float(logits[token]) - log_norm
    if top_n <= 0:
        return chosen, None
    top = np.argpartition(logits, -top_n)[-top_n:]
    top = top[np.argsort(-logits[top], kind="stable")]
    return chosen, [(piece_text(int(t)), float(logits[t]) - log_norm) for t in top]
