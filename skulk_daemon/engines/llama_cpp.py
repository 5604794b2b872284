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
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final

import llama_cpp

from skulk_core.chat.generation import (
    ERROR_CONTEXT_LENGTH_EXCEEDED,
    ERROR_ENGINE_FAILED,
    ERROR_INVALID_REQUEST,
    FinishReason,
    GenerationRequest,
    SamplingParams,
    TokenChunk,
)
from skulk_core.ids import TaskId
from skulk_daemon.engines import _llama_sampling as sampling
from skulk_daemon.engines._llama_draw import takes_draw
from skulk_daemon.engines._llama_exact import ExactBatching
from skulk_daemon.engines._llama_model import (
    DEFAULT_N_BATCH,
    LlamaCppSettings,
    LlamaModel,
    set_llama_logging,
)
from skulk_daemon.engines._llama_prompt_cache import PromptCache
from skulk_daemon.engines._llama_sequences import (
    CancelOrder,
    InboxItem,
    Pending,
    Sequence,
    WarmUp,
    context_exceeded,
    error_chunk,
    invalid_request,
    unserved_finish,
)
from skulk_daemon.engines._llama_settle import settle
from skulk_daemon.engines._llama_slots import NO_SOURCE, Placement, SlotTable
from skulk_daemon.engines.base import ChunkSink, EngineLoadError, EngineStats

__all__ = ["DEFAULT_N_BATCH", "LlamaCppEngine", "LlamaCppSettings", "set_llama_logging"]

log = logging.getLogger(__name__)

_REFUSED_BATCH: Final = "llama.cpp refused to decode this request's batch"


def _reproducible(params: SamplingParams) -> bool:
    """Whether a request's output must not depend on what was served before: a
    greedy or seeded one, which reuses exact cells only (an unseeded sampled one
    may reuse any, a reply's included; see ``_llama_slots``)."""
    return params.temperature <= 0.0 or params.seed is not None


def _fresh_cache(settings: LlamaCppSettings) -> tuple[SlotTable, PromptCache]:
    """Empty slots and an empty RAM prompt cache (a fresh context holds no cells)."""
    rule = ExactBatching(widest=settings.n_batch)
    slots = SlotTable(settings.slots, rule, reuse_replies=settings.reuse_replies)
    return slots, PromptCache(settings.prompt_cache_bytes, slots.reusable)


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
        self._on_fatal = on_fatal
        self._llama: LlamaModel | None = None
        self._inbox: deque[InboxItem] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self._fatal: str | None = None
        self._thread: threading.Thread | None = None
        # Owned by the scheduler thread:
        self._waiting: deque[Pending] = deque()
        self._active: dict[TaskId, Sequence] = {}
        self._generating: list[Sequence] = []
        self._slots, self._prompt_cache = _fresh_cache(settings)
        self._decode_batches = 0
        self._prompt_tokens = 0
        self._settled_tokens = 0
        self._cached_tokens = 0
        self._generated_tokens = 0
        self._completed = 0

    # -- lifecycle ---------------------------------------------------------

    def load(self) -> None:
        settings = self._settings
        self._llama = LlamaModel.open(settings)
        self._slots, self._prompt_cache = _fresh_cache(settings)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="llama-cpp-scheduler", daemon=True)
        self._thread.start()
        log.info(
            "loaded %s: %d slots x %d tokens, %d threads, %s",
            settings.model_path.name,
            settings.slots,
            settings.context_tokens,
            settings.n_threads,
            "never settling"
            if settings.settle_after is None
            else f"settling after {settings.settle_after * 1000:.0f} ms idle",
        )

    def warm_up(self) -> None:
        """Decode one token in a free slot, then forget it; blocks until done."""
        if self._thread is None:
            raise RuntimeError("warm_up() before load()")
        order = WarmUp()
        self._inbox.append(order)
        self._wake.set()
        order.done.wait()
        if order.error is not None:
            raise EngineLoadError(order.error)

    def unload(self) -> None:
        thread = self._thread
        if thread is not None:
            self._stopping = True
            self._wake.set()
            thread.join()
            self._thread = None
        if self._llama is not None:
            self._llama.close()
            self._llama = None
        self._prompt_cache.clear()

    def stats(self) -> EngineStats:
        queued = sum(isinstance(item, Pending) for item in list(self._inbox))
        return EngineStats(
            loaded=self._llama is not None,
            slots=self._settings.slots,
            context_tokens=self._settings.context_tokens,
            active=len(self._active),
            waiting=len(self._waiting) + queued,
            decode_batches=self._decode_batches,
            prompt_tokens=self._prompt_tokens,
            cached_tokens=self._cached_tokens,
            settled_tokens=self._settled_tokens,
            generated_tokens=self._generated_tokens,
            completed=self._completed,
            prompt_cache=self._prompt_cache.stats(),
        )

    # -- requests (any thread) -----------------------------------------------

    def submit(self, request: GenerationRequest) -> None:
        llama = self._llama
        if llama is None or self._thread is None:
            raise RuntimeError("submit() before load()")
        task_id = request.task_id
        if self._fatal is not None:
            self._sink(error_chunk(task_id, ERROR_ENGINE_FAILED, self._fatal))
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
        window = self._settings.context_tokens
        room = window - len(tokens)
        if room < 1 or (params.strict_max_tokens and params.max_tokens > room):
            self._sink(
                error_chunk(
                    task_id,
                    ERROR_CONTEXT_LENGTH_EXCEEDED,
                    context_exceeded(len(tokens), params.max_tokens, window, room < 1),
                )
            )
            return
        pending = Pending(request, tokens, min(params.max_tokens, room), time.perf_counter())
        self._inbox.append(pending)
        self._wake.set()

    def cancel(self, task_id: TaskId) -> None:
        self._inbox.append(CancelOrder(task_id))
        self._wake.set()

    # -- scheduler thread ------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                self._wake.clear()
                if self._inbox:
                    self._drain_inbox()
                if self._stopping:
                    break
                if self._waiting and self._slots.has_free():
                    self._admit()
                if self._generating:
                    self._step()
                elif not self._inbox and not (self._waiting and self._slots.has_free()):
                    self._idle()
        except Exception as exc:
            log.exception("the llama.cpp scheduler failed")
            self._fatal = f"the llama.cpp engine failed: {exc}"
            self._fail_everything(self._fatal)
            if self._on_fatal is not None:
                self._on_fatal(self._fatal)
            return
        self._cancel_everything()

    def _idle(self) -> None:
        """Wait for work; settle a slot if none comes for ``settle_after`` seconds."""
        after = self._settings.settle_after
        index = None if after is None else self._slots.unsettled()
        if index is None:
            self._wake.wait()
        elif not self._wake.wait(after):
            self._settle(index)

    def _settle(self, index: int) -> None:
        assert self._llama is not None
        inbox = self._inbox

        def arrived() -> bool:  # work, or unload(): either stops a settle at once
            return bool(inbox) or self._stopping

        tokens, batches = settle(self._llama, self._slots, index, arrived, self._prompt_cache)
        self._settled_tokens += tokens
        self._decode_batches += batches

    def _drain_inbox(self) -> None:
        inbox = self._inbox
        while inbox:
            item = inbox.popleft()
            if isinstance(item, CancelOrder):
                self._cancel_now(item.task_id)
            elif isinstance(item, WarmUp):
                self._warm_up(item)
            elif item.request.task_id in self._active or any(
                p.request.task_id == item.request.task_id for p in self._waiting
            ):
                task_id = item.request.task_id
                self._sink(
                    error_chunk(
                        task_id, ERROR_INVALID_REQUEST, f"task {task_id} is already running"
                    )
                )
            else:
                self._waiting.append(item)

    def _warm_up(self, order: WarmUp) -> None:
        llama = self._llama
        assert llama is not None
        try:
            slot = self._slots.scratch()
            if slot is None:
                return  # already serving: nothing left to warm
            token, pos, n_seq_id, seq_id, logits = llama.batch_arrays()
            token[0] = max(llama.bos, 0)
            pos[0] = 0
            n_seq_id[0] = 1
            seq_id[0][0] = slot
            logits[0] = 1
            status = llama.decode(1)
            llama.forget(slot)
            if status != 0:
                order.error = f"the warm-up decode failed (llama_decode returned {status})"
        finally:
            order.done.set()

    def _cancel_now(self, task_id: TaskId) -> None:
        sequence = self._active.get(task_id)
        if sequence is not None:
            self._generating = [s for s in self._generating if s is not sequence]
            self._finish(sequence, "cancelled")
            return
        for pending in self._waiting:
            if pending.request.task_id == task_id:
                self._waiting.remove(pending)
                self._sink(unserved_finish(pending))
                return

    def _admit(self) -> None:
        """Give waiting requests free slots (FIFO) and decode their prompts."""
        llama = self._llama
        assert llama is not None
        while self._waiting and self._slots.has_free():
            pending = self._waiting.popleft()
            params = pending.request.sampling
            # NOTE: a plain greedy request is an argmax and a plain sampled one the
            # numpy draw; only penalties and grammars need llama.cpp's chain.
            chain = (
                None
                if takes_draw(params) or sampling.is_plain_greedy(params)
                else sampling.build_chain(llama.n_vocab, params, pending.tokens)
            )
            grammar = (
                sampling.grammar_sampler(llama.vocab, params.grammar)
                if params.grammar is not None
                else None
            )
            placement = self._slots.place(pending.tokens, reproducible=_reproducible(params))
            slot, reused, exact, source = self._take_slot(placement, pending.tokens)
            if reused == 0 or not llama.keep_prefix(slot, reused, source):
                llama.forget(slot)
                reused = exact = 0
            in_flight = len(self._active) + 1
            sequence = Sequence(
                pending, slot, chain, grammar, in_flight, cached_tokens=reused, cached_exact=exact
            )
            for other in self._active.values():
                other.max_in_flight = max(other.max_in_flight, in_flight)
            self._active[sequence.task_id] = sequence
            self._prefill(sequence)

    def _take_slot(
        self, placement: Placement, prompt: list[int]
    ) -> tuple[int, int, int, int | None]:
        """Save what the slot is about to lose to the prompt cache, then restore a
        longer cached prefix of ``prompt`` into it if the cache has one: the slot,
        the tokens its cells give (and how many of those are exact), and the slot
        to copy them from first (or None)."""
        llama = self._llama
        assert llama is not None
        cache = self._prompt_cache
        slot, reused, exact = placement.slot, placement.reused, placement.exact
        source = None if placement.source == NO_SOURCE else placement.source
        if not cache.enabled:
            return slot, reused, exact, source
        evicted = placement.evicted
        if evicted:
            cache.keep(
                evicted, placement.evicted_exact, lambda: llama.save_sequence(slot, len(evicted))
            )
        entry, cached = cache.best(prompt, placement.strict)
        if entry is None or cached <= reused:
            return slot, reused, exact, source
        if not llama.restore_sequence(slot, entry.data):
            return slot, 0, 0, None
        cache.restored(entry, cached)
        return slot, cached, min(cached, entry.exact), None

    def _prefill(self, sequence: Sequence) -> None:
        """Decode what the slot does not hold of a prompt, in the batches the
        exact rule gives (up to ``n_batch`` tokens each), then sample the first
        token from its last logit.

        NOTE: prompts are never packed together, nor with other sequences'
        generation steps. llama.cpp's CPU kernels round differently depending on
        a batch's shape (see ``_llama_exact``), so each prompt gets the cells it
        gets alone and cold, however much of it was reused, and temperature-0
        output does not depend on what else is served or what the cache held.
        """
        llama = self._llama
        assert llama is not None
        tokens = sequence.pending.tokens
        total = len(tokens)
        slot = sequence.seq_id
        started = time.perf_counter()
        n = 0
        self._cached_tokens += sequence.cached_tokens
        start = sequence.cached_tokens
        for n in self._slots.rule.batches(start, total):
            llama.fill_span(tokens, start, n, slot, last_logits=start + n == total)
            if not self._decode(n):
                self._release(sequence, keep=False)
                self._sink(error_chunk(sequence.task_id, ERROR_ENGINE_FAILED, _REFUSED_BATCH))
                return
            self._prompt_tokens += n
            start += n
        sequence.prefill_s = time.perf_counter() - started
        sequence.pos = total
        self._slots.decoded(
            slot, tokens, reused=sequence.cached_tokens, exact=sequence.cached_exact
        )
        if not self._accept(sequence, self._sample(sequence, n - 1), n - 1):
            # NOTE: kept in seq-id order. With a non-unified (and sliding-window) KV
            # cache llama.cpp only packs sequences into one micro-batch when their ids
            # rise in batch order; any other order splits one step into several
            # forward passes (measured: 4 streams at 0.6x of llama-server, 1.0x sorted).
            bisect.insort(self._generating, sequence, key=lambda s: s.seq_id)

    def _step(self) -> None:
        """One decode carrying the next token of every generating sequence."""
        llama = self._llama
        assert llama is not None
        generating = self._generating
        token, pos, n_seq_id, seq_id, logits = llama.batch_arrays()
        for i, sequence in enumerate(generating):
            token[i] = sequence.next_token
            pos[i] = sequence.pos
            n_seq_id[i] = 1
            seq_id[i][0] = sequence.seq_id
            logits[i] = 1
        if not self._decode(len(generating)):
            self._generating = []
            for sequence in generating:
                self._release(sequence, keep=False)
                self._sink(error_chunk(sequence.task_id, ERROR_ENGINE_FAILED, _REFUSED_BATCH))
            return
        sample = self._sample
        done = False
        batched = len(generating) > 1
        for i, sequence in enumerate(generating):
            sequence.reply.append(sequence.next_token)
            sequence.pos += 1
            if batched:
                sequence.batched = True
            if self._accept(sequence, sample(sequence, i), i):
                done = True
        if done:
            self._generating = [s for s in generating if s.task_id in self._active]

    def _decode(self, n_tokens: int) -> bool:
        """Run the batch. A positive status (no KV room, aborted) refuses only
        this batch; a negative one means the context is unusable."""
        assert self._llama is not None
        status = self._llama.decode(n_tokens)
        self._decode_batches += 1
        if status < 0:
            raise RuntimeError(f"llama_decode returned {status}")
        if status > 0:
            log.warning("llama_decode refused a batch of %d (status %d)", n_tokens, status)
        return status == 0

    def _sample(self, sequence: Sequence, index: int) -> int:
        llama = self._llama
        assert llama is not None
        if sequence.greedy:
            return sampling.argmax(llama_cpp.llama_get_logits_ith(llama.ctx, index), llama.n_vocab)
        if sequence.draw is not None:
            return sequence.draw.at(llama_cpp.llama_get_logits_ith(llama.ctx, index), llama.n_vocab)
        assert sequence.chain is not None
        if sequence.grammar is not None:
            return sampling.sample_constrained(
                sequence.chain,
                sequence.grammar,
                sequence.pending.request.sampling,
                ctx=llama.ctx,
                index=index,
                n_vocab=llama.n_vocab,
            )
        token: int = llama_cpp.llama_sampler_sample(sequence.chain, llama.ctx, index)
        return token

    def _accept(self, sequence: Sequence, token: int, index: int) -> bool:
        """Emit one sampled token; finish the sequence if it ends here."""
        llama = self._llama
        assert llama is not None
        sequence.n_generated += 1
        if sequence.n_generated == 1:
            sequence.first_token_at = time.perf_counter()
        data, end_of_generation = llama.pieces.get(token) or llama.piece(token)
        reason: FinishReason | None = None
        if end_of_generation:
            text = sequence.text.flush()
            reason = "stop"
        else:
            text, stopped = sequence.text.push(data)
            if stopped:
                reason = "stop"
            elif sequence.n_generated >= sequence.max_tokens:
                text += sequence.text.flush()
                reason = "length"
        if sequence.logprobs:
            logprob, top = sampling.logprobs(
                llama_cpp.llama_get_logits_ith(llama.ctx, index),
                llama.n_vocab,
                token,
                sequence.top_logprobs,
                llama.piece_text,
            )
            chunk = TokenChunk(
                task_id=sequence.task_id,
                text=text,
                token_id=token,
                logprob=logprob,
                top_logprobs=top,
            )
        else:
            chunk = TokenChunk(task_id=sequence.task_id, text=text, token_id=token)
        self._sink(chunk)
        if reason is not None:
            self._finish(sequence, reason)
            return True
        sequence.next_token = token
        return False

    def _finish(self, sequence: Sequence, reason: FinishReason) -> None:
        self._release(sequence)
        self._completed += 1
        self._generated_tokens += sequence.n_generated
        self._sink(sequence.finish_chunk(reason))

    def _release(self, sequence: Sequence, *, keep: bool = True) -> None:
        """Free the slot and the sampler. The slot's cells stay for a later
        prompt to reuse unless ``keep`` is false (a decode failed: they are
        not to be trusted)."""
        assert self._llama is not None
        del self._active[sequence.task_id]
        if not keep:
            self._llama.forget(sequence.seq_id)
        self._slots.release(sequence.seq_id, keep=keep, reply=sequence.reply)
        if sequence.chain is not None:
            sampling.free_chain(sequence.chain)
        if sequence.grammar is not None:
            sampling.free_chain(sequence.grammar)

    def _cancel_everything(self) -> None:
        for sequence in list(self._active.values()):
            self._finish(sequence, "cancelled")
        self._generating = []
        self._drain_submissions(lambda pending: self._sink(unserved_finish(pending)))

    def _fail_everything(self, message: str) -> None:
        for sequence in list(self._active.values()):
            try:
                self._release(sequence, keep=False)
            finally:
                self._sink(error_chunk(sequence.task_id, ERROR_ENGINE_FAILED, message))
        self._generating = []
        self._drain_submissions(
            lambda pending: self._sink(
                error_chunk(pending.request.task_id, ERROR_ENGINE_FAILED, message)
            )
        )

    def _drain_submissions(self, answer: Callable[[Pending], None]) -> None:
        while self._waiting:
            answer(self._waiting.popleft())
        while self._inbox:
            item = self._inbox.popleft()
            if isinstance(item, Pending):
                answer(item)
            elif isinstance(item, WarmUp):
                item.error = "the engine stopped before warming up"
                item.done.set()
