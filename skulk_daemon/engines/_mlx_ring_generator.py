"""The MLX scheduler's generator for a ring: one sequence at a time over every rank.

It answers the part of mlx-lm's ``BatchGenerator`` interface that
:class:`._mlx_scheduler.Scheduler` uses (``insert``, ``next``, ``remove``,
``close``, ``stream``), so a ring instance keeps the single-node engine's
streaming, stop strings, sampling, logprobs, grammars and cancellation. Each
sequence runs through ``mlx_lm.generate.generate_step`` on a :class:`RingModel`,
whose KV caches live on every rank (one sequence's: no batching).

Prefix reuse: the ranks keep the last sequence's caches. A new prompt that starts
with tokens they hold has them trimmed back to that common prefix on every rank
and prefills only the rest (mlx-lm's server reuses its prompt cache the same way);
otherwise they start fresh.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generate_step, generation_stream
from mlx_lm.models.cache import _BaseCache as LayerCache
from mlx_lm.tokenizer_utils import TokenizerWrapper
from mlx_lm.utils import load_tokenizer

from skulk_daemon.engines._mlx_stage import RingModel, Stage

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]


def load_ring(model_dir: Path, end_layer: int) -> tuple[RingModel, TokenizerWrapper, RingGenerator]:
    """Rank 0 of the ring this process was started in (``MLX_HOSTFILE``/``MLX_RANK``
    are set): layers ``[0, end_layer)``, the tokenizer, and the generator.
    Blocks until every rank has joined the ring."""
    group = mx.distributed.init(strict=True, backend="ring")
    if group.rank() != 0:
        raise ValueError(f"the serving rank must be rank 0, not {group.rank()}")
    stage = Stage(model_dir, 0, end_layer, first=True)
    tokenizer: TokenizerWrapper = load_tokenizer(  # type: ignore[no-untyped-call]
        model_dir, eos_token_ids=stage.eos_token_ids
    )
    model = RingModel(stage, group)
    return model, tokenizer, RingGenerator(model, set(tokenizer.eos_token_ids))


class _Response:
    __slots__ = ("finish_reason", "logprobs", "token", "uid")

    def __init__(self, uid: int, token: int, logprobs: object, finish_reason: str | None) -> None:
        self.uid = uid
        self.token = token
        self.logprobs = logprobs
        self.finish_reason = finish_reason


class _Queued:
    __slots__ = (
        "cache",
        "emitted",
        "max_tokens",
        "processors",
        "prompt",
        "reused",
        "sampler",
        "steps",
        "tokens",
        "uid",
    )

    def __init__(
        self,
        uid: int,
        prompt: list[int],
        max_tokens: int,
        sampler: Sampler | None,
        processors: list[LogitsProcessor] | None,
    ) -> None:
        self.uid = uid
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.sampler = sampler
        self.processors = processors
        self.steps: Iterator[tuple[Any, Any]] | None = None
        self.emitted = 0
        self.reused = 0
        """Prompt tokens the ranks' caches already held."""
        self.tokens = list(prompt)
        """The prompt and every token sampled since."""
        self.cache: list[LayerCache] | None = None
        """This rank's caches for the sequence, once it runs."""


class RingGenerator:
    """See the module docstring."""

    def __init__(self, model: RingModel, stop_tokens: set[int]) -> None:
        self._model = model
        self._stop_tokens = stop_tokens
        self._uids = itertools.count()
        self._queue: collections.deque[_Queued] = collections.deque()
        self._current: _Queued | None = None
        self._held: list[int] = []
        """The tokens the ranks' caches (``self._cache`` on this one) hold."""
        self._cache: list[LayerCache] | None = None
        self.stream = generation_stream

    def insert(
        self,
        prompts: list[list[int]],
        *,
        max_tokens: list[int],
        caches: object = None,
        all_tokens: object = None,
        samplers: list[Sampler] | None = None,
        logits_processors: list[list[LogitsProcessor]] | None = None,
    ) -> list[int]:
        del caches, all_tokens  # the ranks keep their own (see the module docstring)
        uids = []
        for index, prompt in enumerate(prompts):
            uid = next(self._uids)
            sampler = samplers[index] if samplers else None
            processors = logits_processors[index] if logits_processors else None
            self._queue.append(_Queued(uid, prompt, max_tokens[index], sampler, processors))
            uids.append(uid)
        return uids

    def next(self) -> tuple[None, list[_Response]]:
        current = self._current
        if current is None:
            if not self._queue:
                return None, []
            current = self._current = self._queue.popleft()
            cache = current.cache = self._start(current)
            current.steps = generate_step(
                mx.array(current.prompt[current.reused :]),
                self._model,
                max_tokens=current.max_tokens,
                sampler=current.sampler,
                logits_processors=current.processors,
                prompt_cache=cache,
            )
        assert current.steps is not None
        token, logprobs = next(current.steps)
        token = int(token)
        current.emitted += 1
        current.tokens.append(token)
        finish: str | None = None
        if token in self._stop_tokens:
            finish = "stop"
        elif current.emitted >= current.max_tokens:
            finish = "length"
        if finish is not None:
            self._drop(current.uid)
        return None, [_Response(current.uid, token, logprobs, finish)]

    def reused_tokens(self, uid: int) -> int:
        """How many of sequence ``uid``'s prompt tokens it will not prefill (the
        ranks hold them), for its stats; decided now, as the scheduler admits it
        once the sequence before it has ended."""
        for queued in self._queue:
            if queued.uid == uid:
                queued.reused = self._reusable(queued.prompt)
                return queued.reused
        return 0

    def _reusable(self, prompt: list[int]) -> int:
        held = self._held
        if self._cache is None or not self._model.can_trim(len(held)):
            return 0
        common = 0
        # NOTE: at least the prompt's last token is fed again: it gives the logits.
        for mine, theirs in zip(held, prompt[:-1], strict=False):
            if mine != theirs:
                break
            common += 1
        return common

    def _start(self, current: _Queued) -> list[LayerCache]:
        """Caches on every rank for ``current``: the last sequence's, trimmed to the
        prefix it shares with this prompt, or fresh ones."""
        current.reused = self._reusable(current.prompt)
        cache = self._cache
        self._cache = None
        self._held = []
        if current.reused and cache is not None:
            return self._model.trim_cache(cache, current.reused)
        current.reused = 0
        return self._model.make_cache()

    def remove(
        self, uids: list[int], return_prompt_caches: bool = False
    ) -> dict[int, list[LayerCache]]:
        del return_prompt_caches
        for uid in uids:
            self._drop(uid)
        return {}

    def close(self) -> None:
        self._queue.clear()
        self._drop_current()

    def _drop(self, uid: int) -> None:
        if self._current is not None and self._current.uid == uid:
            self._drop_current()
        for queued in list(self._queue):
            if queued.uid == uid:
                self._queue.remove(queued)

    def _drop_current(self) -> None:
        current = self._current
        self._current = None
        if current is not None and current.steps is not None:
            # NOTE: closing the generator ends its pending step here, on this thread.
            close = getattr(current.steps, "close", None)
            if close is not None:
                close()
            self._keep(current)

    def _keep(self, current: _Queued) -> None:
        """Remember what the ranks' caches hold after ``current``: every token fed
        to the model was sampled (and appended) before it was fed."""
        cache = current.cache
        offset = getattr(cache[0], "offset", None) if cache else None
        if cache is not None and isinstance(offset, int) and offset > 0:
            self._cache = cache
            self._held = current.tokens[:offset]
