"""The MLX engine's decode loop: ``mlx-lm``'s ``BatchGenerator`` behind one thread.

Every iteration the thread applies submissions and cancellations in arrival order,
inserts new requests into the batch generator (which prefills them in batches and
moves them into the shared decode batch: continuous batching), runs one
``BatchGenerator.next()`` and turns each sequence's token into a ``TokenChunk``
(text through the same stop-string stream the llama.cpp engine uses) or its
terminal ``FinishChunk``.

Prompt-prefix reuse: a finished sequence's KV cache is kept (the newest
``PROMPT_CACHE_ENTRIES``); a prompt that starts with what one holds is inserted
with a copy of it and prefills only the rest, as mlx-lm's own server does. (A
ring's generator keeps its ranks' caches itself and says what it reused.)
"""

from __future__ import annotations

import collections
import copy
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

import mlx.core as mx
import numpy as np
from mlx_lm.generate import BatchGenerator

from skulk_core.chat.generation import (
    ERROR_ENGINE_FAILED,
    ErrorChunk,
    FinishReason,
    TokenChunk,
)
from skulk_core.ids import TaskId
from skulk_daemon.engines._mlx_sequences import (
    CancelOrder,
    Pending,
    Sequence,
    WarmUp,
    processors_for,
    sampler_for,
    unserved_finish,
)
from skulk_daemon.engines.base import ChunkSink

log = logging.getLogger(__name__)

PROMPT_CACHE_ENTRIES: Final = 4
"""Finished sequences whose KV caches are kept for prefix reuse."""
IDLE_WAIT_S: Final = 0.5

Order = Pending | CancelOrder | WarmUp


class Counters:
    def __init__(self) -> None:
        self.decode_batches = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.generated_tokens = 0
        self.completed = 0


class _Step(Protocol):
    """What mlx-lm's batch generator answers for one sequence and one step."""

    token: int
    finish_reason: str | None
    logprobs: object


class Scheduler:
    """Owns the batch generator; only its thread touches MLX state."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        sink: ChunkSink,
        slots: int,
        on_fatal: Callable[[str], None] | None,
        *,
        generator: object | None = None,
    ) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self._sink = sink
        self._on_fatal = on_fatal
        self._slots = slots
        # mlx-lm's generator is untyped; only this class touches it. A ring brings
        # its own (one sequence over every rank: _mlx_ring_generator.py).
        self._generator: Any = generator or BatchGenerator(
            model,
            stop_tokens=[[token] for token in tokenizer.eos_token_ids],
            completion_batch_size=slots,
            prefill_batch_size=slots,
        )
        self._ring_reuse: Callable[[int], int] | None = getattr(
            self._generator, "reused_tokens", None
        )
        self.inbox: collections.deque[Order] = collections.deque()
        self._wake = threading.Event()
        self._stopping = False
        self.waiting: collections.deque[Pending] = collections.deque()
        self.active: dict[int, Sequence] = {}
        self._uids: dict[TaskId, int] = {}
        self._kept: collections.deque[tuple[list[int], list[object]]] = collections.deque(
            maxlen=PROMPT_CACHE_ENTRIES
        )
        self.counters = Counters()
        self.fatal: str | None = None

    # -- any thread ---------------------------------------------------------

    def post(self, order: Order) -> None:
        self.inbox.append(order)
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    # -- the scheduler thread ----------------------------------------------------

    def run(self) -> None:
        try:
            with mx.stream(self._generator.stream):
                while not self._stopping:
                    self._apply_inbox()
                    self._admit()
                    if not self.active:
                        self._wake.wait(IDLE_WAIT_S)
                        self._wake.clear()
                        continue
                    self._step()
        except Exception as exc:
            log.exception("the MLX engine failed")
            self._fail_all(f"the MLX engine failed: {exc}")
            return
        for sequence in list(self.active.values()):
            self._end(sequence, "cancelled", None)
        while self.waiting:
            self._sink(unserved_finish(self.waiting.popleft()))
        self._generator.close()

    def _apply_inbox(self) -> None:
        while self.inbox:
            order = self.inbox.popleft()
            match order:
                case Pending():
                    self.waiting.append(order)
                case CancelOrder(task_id=task_id):
                    self._cancel(task_id)
                case WarmUp():
                    self._warm_up(order)

    def _cancel(self, task_id: TaskId) -> None:
        for pending in list(self.waiting):
            if pending.request.task_id == task_id:
                self.waiting.remove(pending)
                self._sink(unserved_finish(pending))
                return
        uid = self._uids.get(task_id)
        if uid is not None and uid in self.active:
            self._end(self.active[uid], "cancelled", None)

    def _warm_up(self, order: WarmUp) -> None:
        try:
            tokens = self._tokenizer.encode("Hello")
            (uid,) = self._generator.insert([tokens], max_tokens=[1])
            done = False
            while not done:
                _, responses = self._generator.next()
                done = any(response.uid == uid for response in responses)
            self._generator.remove([uid])
        except Exception as exc:
            order.error = f"the MLX warm-up decode failed: {exc}"
        order.done.set()

    def _admit(self) -> None:
        while self.waiting and len(self.active) < self._slots:
            pending = self.waiting.popleft()
            params = pending.request.sampling
            prompt, cache, cached = self._reuse(pending.tokens)
            (uid,) = self._generator.insert(
                [prompt],
                max_tokens=[pending.max_tokens],
                caches=[cache] if cache is not None else None,
                all_tokens=[pending.tokens[:cached]],
                samplers=[sampler_for(params)],
                logits_processors=[processors_for(params, pending.matcher)],
            )
            if self._ring_reuse is not None:
                # A ring's generator keeps its ranks' caches itself.
                cached = self._ring_reuse(uid)
            if params.seed is not None:
                # NOTE: mlx-lm samples a batch from one global key; a seed makes a
                # lone request reproducible, not one sharing the batch with others.
                mx.random.seed(params.seed)
            sequence = Sequence(pending, len(self.active) + 1, cached, self._tokenizer.detokenizer)
            self.active[uid] = sequence
            self._uids[sequence.task_id] = uid
            for other in self.active.values():
                other.max_in_flight = max(other.max_in_flight, len(self.active))
            self.counters.prompt_tokens += len(pending.tokens) - cached
            self.counters.cached_tokens += cached

    def _reuse(self, tokens: list[int]) -> tuple[list[int], list[object] | None, int]:
        """``(prompt to prefill, cache to start from, tokens it already holds)``."""
        best: tuple[list[int], list[object]] | None = None
        for held, cache in self._kept:
            fits = len(held) < len(tokens) and tokens[: len(held)] == held
            if fits and (best is None or len(held) > len(best[0])):
                best = (held, cache)
        if best is None:
            return tokens, None, 0
        held, cache = best
        # NOTE: a copy: the generator extends the cache in place, and the kept
        # entry must still describe only its own tokens for the next match.
        return tokens[len(held) :], copy.deepcopy(cache), len(held)

    def _step(self) -> None:
        _, responses = self._generator.next()
        if not responses:
            return
        self.counters.decode_batches += 1
        batched = len(responses) > 1
        for response in responses:
            sequence = self.active.get(response.uid)
            if sequence is None:
                continue
            sequence.batched = sequence.batched or batched
            self._deliver(sequence, response)

    def _deliver(self, sequence: Sequence, response: _Step) -> None:
        token = int(response.token)
        if sequence.first_token_at is None:
            sequence.first_token_at = time.perf_counter()
        sequence.generated.append(token)
        self.counters.generated_tokens += 1
        eos = response.finish_reason == "stop"
        last = response.finish_reason is not None
        detokenizer: Any = sequence.detokenizer
        if not eos:
            detokenizer.add_token(token)
        if last:
            # NOTE: the last token carries whatever text was still held back (a
            # partial character, a possible stop-string prefix), so every sampled
            # token keeps exactly one chunk.
            detokenizer.finalize()
        text, stopped = sequence.stream.push(detokenizer.last_segment.encode())
        if last and not stopped:
            text += sequence.stream.flush()
        params = sequence.pending.request.sampling
        logprob: float | None = None
        top: list[tuple[str, float]] | None = None
        if params.logprobs:
            row = np.asarray(response.logprobs, dtype=np.float32)
            logprob = float(row[token])
            if params.top_logprobs:
                best = np.argpartition(-row, params.top_logprobs - 1)[: params.top_logprobs]
                pairs = sorted(((int(i), float(row[i])) for i in best), key=lambda pair: -pair[1])
                top = [(self._tokenizer.decode([i]), value) for i, value in pairs]
        self._sink(
            TokenChunk(
                task_id=sequence.task_id,
                text=text,
                token_id=token,
                logprob=logprob,
                top_logprobs=top,
            )
        )
        if stopped:
            self._end(sequence, "stop", sequence.stream.matched)
        elif eos:
            self._end(sequence, "stop", None)
        elif response.finish_reason == "length":
            self._end(sequence, "length", None)

    def _end(self, sequence: Sequence, reason: FinishReason, stop: str | None) -> None:
        uid = self._uids.pop(sequence.task_id)
        self.active.pop(uid, None)
        try:
            kept = self._generator.remove([uid], return_prompt_caches=True)
        except Exception:
            kept = {}
        entry = kept.get(uid)
        if entry is not None and reason != "cancelled":
            cache, _ = entry
            self._keep(sequence, cache)
        self.counters.completed += 1
        self._sink(sequence.finish(reason, stop))

    def _keep(self, sequence: Sequence, cache: list[object]) -> None:
        held = [*sequence.pending.tokens, *sequence.generated]
        offset = getattr(cache[0], "offset", None) if cache else None
        if not isinstance(offset, int) or offset <= 0:
            return
        self._kept.append((held[:offset], cache))

    def _fail_all(self, message: str) -> None:
        self.fatal = message
        for sequence in list(self.active.values()):
            self._sink(
                ErrorChunk(task_id=sequence.task_id, code=ERROR_ENGINE_FAILED, message=message)
            )
        self.active.clear()
        while self.waiting:
            pending = self.waiting.popleft()
            self._sink(
                ErrorChunk(
                    task_id=pending.request.task_id, code=ERROR_ENGINE_FAILED, message=message
                )
            )
        if self._on_fatal is not None:
            self._on_fatal(message)
