"""The llama.cpp engine's scheduler thread: the only user of the context.

Every iteration it applies submissions and cancellations in arrival order, admits
waiting requests into free slots (prefilling each prompt alone, in exact batches),
runs one decode carrying the next token of every generating sequence, or, idle,
settles a slot. See :mod:`skulk_daemon.engines.llama_cpp` for what that buys.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from skulk_core.chat.generation import (
    ERROR_ENGINE_FAILED,
    ERROR_INVALID_REQUEST,
    FinishReason,
    SamplingParams,
)
from skulk_core.ids import TaskId
from skulk_daemon.engines import _llama_sampling as sampling
from skulk_daemon.engines._llama_exact import ExactBatching
from skulk_daemon.engines._llama_model import LlamaCppSettings, LlamaModel
from skulk_daemon.engines._llama_prompt_cache import PromptCache
from skulk_daemon.engines._llama_sequences import (
    CancelOrder,
    InboxItem,
    Pending,
    Sequence,
    WarmUp,
    error_chunk,
    unserved_finish,
)
from skulk_daemon.engines._llama_settle import settle
from skulk_daemon.engines._llama_slots import NO_SOURCE, Placement, SlotTable
from skulk_daemon.engines._llama_tokens import release, sample, samplers_for
from skulk_daemon.engines.base import ChunkSink

log = logging.getLogger(__name__)

_REFUSED_BATCH: Final = "llama.cpp refused to decode this request's batch"


def reproducible(params: SamplingParams) -> bool:
    """Whether a request's output must not depend on what was served before: a
    greedy or seeded one, which reuses exact cells only (an unseeded sampled one
    may reuse any, a reply's included; see ``_llama_slots``)."""
    return params.temperature <= 0.0 or params.seed is not None


def fresh_cache(settings: LlamaCppSettings) -> tuple[SlotTable, PromptCache]:
    """Empty slots and an empty RAM prompt cache (a fresh context holds no cells)."""
    rule = ExactBatching(widest=settings.n_batch)
    slots = SlotTable(settings.slots, rule, reuse_replies=settings.reuse_replies)
    return slots, PromptCache(settings.prompt_cache_bytes, slots.reusable)


def take_slot(
    llama: LlamaModel, cache: PromptCache, placement: Placement, prompt: list[int]
) -> tuple[int, int, int, int | None]:
    """Save what the slot is about to lose to the prompt cache, then restore a
    longer cached prefix of ``prompt`` into it if the cache has one: the slot,
    the tokens its cells give (and how many of those are exact), and the slot
    to copy them from first (or None)."""
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


@dataclass(slots=True)
class Counters:
    """What the scheduler did since the engine was made (its stats)."""

    decode_batches: int = 0
    prompt_tokens: int = 0
    settled_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    completed: int = 0


class Scheduler:
    """Owns the waiting, active and generating sequences, the slots and the prompt
    cache; other threads reach it only through :meth:`post` and :meth:`stop`."""

    def __init__(
        self,
        settings: LlamaCppSettings,
        sink: ChunkSink,
        on_fatal: Callable[[str], None] | None,
    ) -> None:
        self._settings = settings
        self._sink = sink
        self._on_fatal = on_fatal
        self._llama: LlamaModel | None = None
        self.inbox: deque[InboxItem] = deque()
        self._wake = threading.Event()
        self.stopping = False
        self.fatal: str | None = None
        """Why the engine broke beyond one request (None while it serves)."""
        self.counters = Counters()
        # Owned by the scheduler thread:
        self.waiting: deque[Pending] = deque()
        self.active: dict[TaskId, Sequence] = {}
        self._generating: list[Sequence] = []
        self._slots, self.prompt_cache = fresh_cache(settings)

    def attach(self, llama: LlamaModel) -> None:
        """Serve ``llama``'s context from now on (before the thread starts)."""
        self._llama = llama
        self._slots, self.prompt_cache = fresh_cache(self._settings)
        self.stopping = False

    def post(self, item: InboxItem) -> None:
        """Hand the thread a submission, a cancellation or a warm-up (any thread)."""
        self.inbox.append(item)
        self._wake.set()

    def stop(self) -> None:
        """Ask the thread to cancel what it serves and return (any thread)."""
        self.stopping = True
        self._wake.set()

    def run(self) -> None:
        """The scheduler thread: serve the inbox until :meth:`stop`."""
        try:
            while True:
                self._wake.clear()
                if self.inbox:
                    self._drain_inbox()
                if self.stopping:
                    break
                if self.waiting and self._slots.has_free():
                    self._admit()
                if self._generating:
                    self._step()
                elif not self.inbox and not (self.waiting and self._slots.has_free()):
                    self._idle()
        except Exception as exc:
            log.exception("the llama.cpp scheduler failed")
            self.fatal = f"the llama.cpp engine failed: {exc}"
            self._fail_everything(self.fatal)
            if self._on_fatal is not None:
                self._on_fatal(self.fatal)
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
        inbox = self.inbox

        def arrived() -> bool:  # work, or unload(): either stops a settle at once
            return bool(inbox) or self.stopping

        tokens, batches = settle(self._llama, self._slots, index, arrived, self.prompt_cache)
        self.counters.settled_tokens += tokens
        self.counters.decode_batches += batches

    def _drain_inbox(self) -> None:
        inbox = self.inbox
        while inbox:
            item = inbox.popleft()
            if isinstance(item, CancelOrder):
                self._cancel_now(item.task_id)
            elif isinstance(item, WarmUp):
                self._warm_up(item)
            elif item.request.task_id in self.active or any(
                p.request.task_id == item.request.task_id for p in self.waiting
            ):
                task_id = item.request.task_id
                self._sink(
                    error_chunk(
                        task_id, ERROR_INVALID_REQUEST, f"task {task_id} is already running"
                    )
                )
            else:
                self.waiting.append(item)

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
        sequence = self.active.get(task_id)
        if sequence is not None:
            self._generating = [s for s in self._generating if s is not sequence]
            self._finish(sequence, "cancelled")
            return
        for pending in self.waiting:
            if pending.request.task_id == task_id:
                self.waiting.remove(pending)
                self._sink(unserved_finish(pending))
                return

    def _admit(self) -> None:
        """Give waiting requests free slots (FIFO) and decode their prompts."""
        llama = self._llama
        assert llama is not None
        while self.waiting and self._slots.has_free():
            pending = self.waiting.popleft()
            params = pending.request.sampling
            chain, grammar = samplers_for(llama, params, pending.tokens)
            placement = self._slots.place(pending.tokens, reproducible=reproducible(params))
            slot, reused, exact, source = take_slot(
                llama, self.prompt_cache, placement, pending.tokens
            )
            if reused == 0 or not llama.keep_prefix(slot, reused, source):
                llama.forget(slot)
                reused = exact = 0
            in_flight = len(self.active) + 1
            sequence = Sequence(
                pending, slot, chain, grammar, in_flight, cached_tokens=reused, cached_exact=exact
            )
            for other in self.active.values():
                other.max_in_flight = max(other.max_in_flight, in_flight)
            self.active[sequence.task_id] = sequence
            self._prefill(sequence)

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
        self.counters.cached_tokens += sequence.cached_tokens
        start = sequence.cached_tokens
        for n in self._slots.rule.batches(start, total):
            llama.fill_span(tokens, start, n, slot, last_logits=start + n == total)
            if not self._decode(n):
                self._release(sequence, keep=False)
                self._sink(error_chunk(sequence.task_id, ERROR_ENGINE_FAILED, _REFUSED_BATCH))
                return
            self.counters.prompt_tokens += n
            start += n
        sequence.prefill_s = time.perf_counter() - started
        sequence.pos = total
        self._slots.decoded(
            slot, tokens, reused=sequence.cached_tokens, exact=sequence.cached_exact
        )
        if not self._accept(sequence, sample(llama, sequence, n - 1), n - 1):
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
        done = False
        batched = len(generating) > 1
        for i, sequence in enumerate(generating):
            sequence.reply.append(sequence.next_token)
            sequence.pos += 1
            if batched:
                sequence.batched = True
            if self._accept(sequence, sample(llama, sequence, i), i):
                done = True
        if done:
            self._generating = [s for s in generating if s.task_id in self.active]

    def _decode(self, n_tokens: int) -> bool:
        """Run the batch. A positive status (no KV room, aborted) refuses only
        this batch; a negative one means the context is unusable."""
        assert self._llama is not None
        status = self._llama.decode(n_tokens)
        self.counters.decode_batches += 1
        if status < 0:
            raise RuntimeError(f"llama_decode returned {status}")
        if status > 0:
            log.warning("llama_decode refused a batch of %d (status %d)", n_tokens, status)
        return status == 0

    def _accept(self, sequence: Sequence, token: int, index: int) -> bool:
        """Emit one sampled token; finish the sequence if it ends here."""
        assert self._llama is not None
        chunk, reason = release(self._llama, sequence, token, index)
        self._sink(chunk)
        if reason is not None:
            self._finish(sequence, reason)
            return True
        sequence.next_token = token
        return False

    def _finish(self, sequence: Sequence, reason: FinishReason) -> None:
        self._release(sequence)
        self.counters.completed += 1
        self.counters.generated_tokens += sequence.n_generated
        self._sink(sequence.finish_chunk(reason))

    def _release(self, sequence: Sequence, *, keep: bool = True) -> None:
        """Free the slot and the sampler. The slot's cells stay for a later
        prompt to reuse unless ``keep`` is false (a decode failed: they are
        not to be trusted)."""
        assert self._llama is not None
        del self.active[sequence.task_id]
        if not keep:
            self._llama.forget(sequence.seq_id)
        self._slots.release(sequence.seq_id, keep=keep, reply=sequence.reply)
        if sequence.chain is not None:
            sampling.free_chain(sequence.chain)
        if sequence.grammar is not None:
            sampling.free_chain(sequence.grammar)

    def _cancel_everything(self) -> None:
        for sequence in list(self.active.values()):
            self._finish(sequence, "cancelled")
        self._generating = []
        self._drain_submissions(lambda pending: self._sink(unserved_finish(pending)))

    def _fail_everything(self, message: str) -> None:
        for sequence in list(self.active.values()):
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
        while self.waiting:
            answer(self.waiting.popleft())
        while self.inbox:
            item = self.inbox.popleft()
            if isinstance(item, Pending):
                answer(item)
            elif isinstance(item, WarmUp):
                item.error = "the engine stopped before warming up"
                item.done.set()
