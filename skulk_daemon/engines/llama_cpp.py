"""Continuous batching over llama.cpp's batch API (llama-cpp-python's low-level bindings).

One model, one context with ``slots`` sequences, each with its own KV window of
``context_tokens`` (non-unified KV cache, so one long conversation cannot eat
another's room). One scheduler thread owns the context; every iteration it

1. applies submissions and cancellations in arrival order,
2. admits waiting requests (FIFO) into free slots: each prompt is decoded into
   its sequence in batches that keep its cells exact (see ``_llama_exact``)
   and its first token sampled;
   a slot keeps its cells after a request, so a prompt that starts with what a
   slot already holds (or what another slot holds: its cells are copied)
   decodes only the rest (see ``_llama_slots``); what a slot loses to another
   prompt is saved to a bounded host-RAM cache and restored on a later match
   (see ``_llama_prompt_cache``),
3. runs ONE ``llama_decode`` holding the next token of every generating
   sequence, and samples each with its own sampler (an argmax, the numpy
   draw of ``_llama_draw``, or llama.cpp's chain for penalties and grammars),
4. or, idle for ``settle_after`` seconds, settles a slot whose last request was
   greedy or seeded: decodes its reply again in exact batches, so that
   conversation's next greedy turn reuses it too (see ``_llama_settle``).

Concurrent requests therefore share decode batches, which is what makes serving
N users cost far less than N times one user.

Temperature-0 output does not depend on what else is being served as long as a
step carries at most three sequences: llama.cpp's CPU kernels for repacked
quantized weights switch to a 4-row GEMM (rounding differently) from four rows
up. Prompts are decoded alone for the same reason (see ``_prefill``).

The engine is the face other threads see (load, submit, cancel, stats); the
scheduler thread and everything it owns are ``_llama_scheduler``'s, and what one
sampled position becomes is ``_llama_tokens``'.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from skulk_core.chat.generation import (
    ERROR_CONTEXT_LENGTH_EXCEEDED,
    ERROR_ENGINE_FAILED,
    ERROR_INVALID_REQUEST,
    GenerationRequest,
)
from skulk_core.ids import TaskId
from skulk_daemon.engines import _llama_sampling as sampling
from skulk_daemon.engines._llama_model import (
    DEFAULT_N_BATCH,
    LlamaCppSettings,
    LlamaModel,
    set_llama_logging,
)
from skulk_daemon.engines._llama_scheduler import Scheduler
from skulk_daemon.engines._llama_sequences import (
    CancelOrder,
    Pending,
    WarmUp,
    error_chunk,
    invalid_request,
    token_budget,
)
from skulk_daemon.engines.base import ChunkSink, EngineLoadError, EngineStats

__all__ = ["DEFAULT_N_BATCH", "LlamaCppEngine", "LlamaCppSettings", "set_llama_logging"]

log = logging.getLogger(__name__)


class LlamaCppEngine:
    """The in-process llama.cpp engine (see the module docstring).

    ``sink`` receives every chunk (see :data:`ChunkSink`). ``on_fatal`` is
    called once, from the scheduler thread, if the engine breaks beyond one
    request (every request in flight has then had an ``engine_failed`` error).
    """

    def __init__(
        self,
        settings: LlamaCppSettings,
        sink: ChunkSink,
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        self._settings = settings
        self._sink = sink
        self._llama: LlamaModel | None = None
        self._scheduler = Scheduler(settings, sink, on_fatal)
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------

    def load(self) -> None:
        settings = self._settings
        self._llama = LlamaModel.open(settings)
        self._scheduler.attach(self._llama)
        self._thread = threading.Thread(
            target=self._scheduler.run, name="llama-cpp-scheduler", daemon=True
        )
        self._thread.start()
        log.info(
            "loaded %s: %s x %d tokens, %d threads, KV %s, flash attention %s, %s",
            settings.model_path.name,
            "1 slot" if settings.slots == 1 else f"{settings.slots} slots",
            settings.context_tokens,
            settings.n_threads,
            settings.kv_cache or "default",
            {None: "auto", True: "on", False: "off"}[settings.flash_attention],
            "reusing replies"
            if settings.reuse_replies
            else "bit-exact, never settling"
            if settings.settle_after is None
            else f"bit-exact, settling after {settings.settle_after * 1000:.0f} ms idle",
        )

    def warm_up(self) -> None:
        """Decode one token in a free slot, then forget it; blocks until done."""
        if self._thread is None:
            raise RuntimeError("warm_up() before load()")
        order = WarmUp()
        self._scheduler.post(order)
        order.done.wait()
        if order.error is not None:
            raise EngineLoadError(order.error)

    def unload(self) -> None:
        thread = self._thread
        if thread is not None:
            self._scheduler.stop()
            thread.join()
            self._thread = None
        if self._llama is not None:
            self._llama.close()
            self._llama = None
        self._scheduler.prompt_cache.clear()

    def stats(self) -> EngineStats:
        scheduler = self._scheduler
        counters = scheduler.counters
        queued = sum(isinstance(item, Pending) for item in list(scheduler.inbox))
        return EngineStats(
            loaded=self._llama is not None,
            slots=self._settings.slots,
            context_tokens=self._settings.context_tokens,
            active=len(scheduler.active),
            waiting=len(scheduler.waiting) + queued,
            decode_batches=counters.decode_batches,
            prompt_tokens=counters.prompt_tokens,
            cached_tokens=counters.cached_tokens,
            settled_tokens=counters.settled_tokens,
            generated_tokens=counters.generated_tokens,
            completed=counters.completed,
            prompt_cache=scheduler.prompt_cache.stats(),
        )

    # -- requests (any thread) -----------------------------------------------

    def submit(self, request: GenerationRequest) -> None:
        llama = self._llama
        if llama is None or self._thread is None:
            raise RuntimeError("submit() before load()")
        task_id = request.task_id
        fatal = self._scheduler.fatal
        if fatal is not None:
            self._sink(error_chunk(task_id, ERROR_ENGINE_FAILED, fatal))
            return
        params = request.sampling
        refusal = invalid_request(params.max_tokens, params.top_logprobs)
        if refusal is None and params.grammar is not None:
            try:
                sampling.check_grammar(llama.vocab, params.grammar)
            except sampling.GrammarError as exc:
                refusal = str(exc)
        if refusal is not None:
            self._sink(error_chunk(task_id, ERROR_INVALID_REQUEST, refusal))
            return
        # NOTE: tokenizing here, on the caller's thread, keeps long prompts off the
        # decode loop and refuses oversized ones without queueing them; the
        # vocabulary is read-only, so this is safe beside a running decode.
        tokens = llama.tokenize(request.prompt)
        if not tokens:
            self._sink(error_chunk(task_id, ERROR_INVALID_REQUEST, "the prompt is empty"))
            return
        budget = token_budget(
            len(tokens), params.max_tokens, params.strict_max_tokens, self._settings.context_tokens
        )
        if isinstance(budget, str):
            self._sink(error_chunk(task_id, ERROR_CONTEXT_LENGTH_EXCEEDED, budget))
            return
        self._scheduler.post(Pending(request, tokens, budget, time.perf_counter()))

    def cancel(self, task_id: TaskId) -> None:
        self._scheduler.post(CancelOrder(task_id))
