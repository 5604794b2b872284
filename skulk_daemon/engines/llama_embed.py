"""Sentence embeddings with llama.cpp: one pooled, L2-normalised vector per input.

The context is opened with ``embeddings=True`` and the pooling the GGUF declares
(mean for all-MiniLM-L6-v2). A request's inputs are tokenized (BERT's
tokenizer adds ``[CLS]``/``[SEP]``), refused whole if any input is longer than the
window, then packed in order into batches of up to :data:`MAX_BATCH_SEQUENCES`
inputs and ``context_tokens`` tokens, one sequence per input, so several short
inputs share one ``llama_decode``. Each batch's pooled vectors are read with
``llama_get_embeddings_seq``.

Vectors are L2-normalised, as sentence-transformers' ``Normalize`` module does for
all-MiniLM-L6-v2, as llama.cpp's server does by default, and as OpenAI's
embeddings are; cosine similarity is then a dot product.

One worker thread owns the context and serves requests in arrival order;
:meth:`LlamaEmbeddingEngine.cancel` takes effect between batches.
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import llama_cpp
import numpy as np
import numpy.typing as npt

from skulk_core.chat.generation import (
    ERROR_CONTEXT_LENGTH_EXCEEDED,
    ERROR_ENGINE_FAILED,
    ERROR_INVALID_REQUEST,
    ErrorChunk,
)
from skulk_core.ids import TaskId
from skulk_daemon.engines._llama_model import LLAMA_LOG, load_model, set_llama_logging
from skulk_daemon.engines.base import EngineLoadError

__all__ = [
    "EmbedCancelled",
    "EmbedResult",
    "EmbedSettings",
    "EmbedSink",
    "Embeddings",
    "LlamaEmbedder",
    "LlamaEmbeddingEngine",
    "set_llama_logging",
]

log = logging.getLogger(__name__)

MAX_BATCH_SEQUENCES: Final = 64
"""Inputs packed into one ``llama_decode`` (llama.cpp allows at most 256)."""
NORMALIZE_EPSILON: Final = 1e-12
"""Floor on the norm, as ``torch.nn.functional.normalize`` uses: a zero vector stays zero."""
WARM_UP_TEXT: Final = "warm up"


class EmbedSettings:
    """How to load an embedding model. ``context_tokens`` is the longest input, in tokens."""

    __slots__ = ("context_tokens", "model_path", "n_threads")

    def __init__(
        self, model_path: str | Path, *, context_tokens: int, n_threads: int | None = None
    ) -> None:
        if context_tokens < 1:
            raise ValueError(f"context_tokens must be positive, got {context_tokens}")
        self.model_path = Path(model_path)
        self.context_tokens = context_tokens
        self.n_threads = n_threads if n_threads else (os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class Embeddings:
    """One request's vectors: ``count`` rows of ``dimensions`` little-endian float32."""

    task_id: TaskId
    vectors: bytes
    count: int
    dimensions: int
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class EmbedCancelled:
    task_id: TaskId


EmbedResult = Embeddings | ErrorChunk | EmbedCancelled
EmbedSink = Callable[[EmbedResult], None]
"""Gets exactly one result per submitted request, from the engine's thread."""


class EmbedFailed(RuntimeError):
    """llama.cpp refused a batch; the message is safe to show a user."""


class LlamaEmbedder:
    """An embedding model and its context. Not thread-safe: one caller at a time."""

    def __init__(self, model: object, ctx: object, settings: EmbedSettings) -> None:
        self._model: object | None = model
        self._ctx: object | None = ctx
        self._memory: object | None = llama_cpp.llama_get_memory(ctx) or None
        self._vocab: object = llama_cpp.llama_model_get_vocab(model)
        self.context_tokens = settings.context_tokens
        self.dimensions: int = llama_cpp.llama_model_n_embd_out(model)
        self._batch: llama_cpp.llama_batch | None = llama_cpp.llama_batch_init(
            settings.context_tokens, 0, 1
        )

    @classmethod
    def open(cls, settings: EmbedSettings) -> LlamaEmbedder:
        path = settings.model_path
        model = load_model(path, settings.context_tokens)
        ctx = llama_cpp.llama_init_from_model(model, _context_params(settings))
        if not ctx:
            llama_cpp.llama_model_free(model)
            raise EngineLoadError(
                f"llama.cpp could not create an embedding context for {path.name}"
                f"{LLAMA_LOG.first_error()}"
            )
        if llama_cpp.llama_pooling_type(ctx) == llama_cpp.LLAMA_POOLING_TYPE_NONE:
            llama_cpp.llama_free(ctx)
            llama_cpp.llama_model_free(model)
            raise EngineLoadError(
                f"{path.name} declares no pooling, so it gives no sentence embeddings"
            )
        return cls(model, ctx, settings)

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx is not None:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model is not None:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def tokenize(self, text: str) -> list[int]:
        """Tokens with the model's own wrapping (``[CLS] ... [SEP]`` for BERT).

        Special-token text in the input (``"[SEP]"``) is not parsed as a special
        token: user text never injects control tokens.
        """
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buffer = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(
            self._vocab, data, len(data), buffer, capacity, True, False
        )
        if count < 0:
            capacity = -count
            buffer = (llama_cpp.llama_token * capacity)()
            count = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), buffer, capacity, True, False
            )
        return list(buffer[:count])

    def encode(self, sequences: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """Pooled, L2-normalised vectors for up to :data:`MAX_BATCH_SEQUENCES` token
        sequences totalling at most ``context_tokens`` tokens, in one decode."""
        batch = self._batch
        assert batch is not None
        total = sum(len(tokens) for tokens in sequences)
        if not sequences or len(sequences) > MAX_BATCH_SEQUENCES or total > self.context_tokens:
            raise ValueError(f"a batch of {len(sequences)} sequences and {total} tokens")
        position = ctypes.cast(batch.pos, ctypes.POINTER(ctypes.c_int32))
        index = 0
        for seq, tokens in enumerate(sequences):
            for pos, token in enumerate(tokens):
                batch.token[index] = token
                position[index] = pos
                batch.n_seq_id[index] = 1
                batch.seq_id[index][0] = seq
                batch.logits[index] = 1
                index += 1
        batch.n_tokens = index
        # NOTE: an encoder-only model (BERT) has no memory and llama_decode runs its
        # encoder; a decoder used for embeddings keeps KV cells, dropped after each batch.
        status = llama_cpp.llama_decode(self._ctx, batch)
        if self._memory is not None:
            llama_cpp.llama_memory_clear(self._memory, True)
        if status != 0:
            raise EmbedFailed(f"llama.cpp could not embed this batch (status {status})")
        vectors = np.empty((len(sequences), self.dimensions), dtype=np.float32)
        for seq in range(len(sequences)):
            pointer = llama_cpp.llama_get_embeddings_seq(self._ctx, seq)
            if not pointer:
                raise EmbedFailed("llama.cpp returned no pooled embedding")
            vectors[seq] = np.ctypeslib.as_array(pointer, shape=(self.dimensions,))
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        normalized: npt.NDArray[np.float32] = vectors / np.maximum(norms, NORMALIZE_EPSILON)
        return normalized


def _context_params(settings: EmbedSettings) -> llama_cpp.llama_context_params:
    params: llama_cpp.llama_context_params = llama_cpp.llama_context_default_params()
    params.n_ctx = settings.context_tokens
    # NOTE: a non-causal encoder sees a whole input in one ubatch, so the ubatch
    # must hold the longest input the window allows.
    params.n_batch = settings.context_tokens
    params.n_ubatch = settings.context_tokens
    params.n_seq_max = MAX_BATCH_SEQUENCES
    # One window shared by the batch's sequences: a batch never holds more tokens
    # than one window, and cells are cleared after every batch.
    params.kv_unified = True
    params.embeddings = True
    params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED
    params.n_threads = settings.n_threads
    params.n_threads_batch = settings.n_threads
    params.no_perf = True
    return params


def pack(lengths: Sequence[int], max_tokens: int) -> list[range]:
    """Consecutive runs of inputs for one batch each: at most ``max_tokens`` tokens and
    :data:`MAX_BATCH_SEQUENCES` inputs per run, order kept. Every length must be at
    most ``max_tokens``."""
    runs: list[range] = []
    start, tokens = 0, 0
    for index, length in enumerate(lengths):
        if index > start and (tokens + length > max_tokens or index - start == MAX_BATCH_SEQUENCES):
            runs.append(range(start, index))
            start, tokens = index, 0
        tokens += length
    if start < len(lengths):
        runs.append(range(start, len(lengths)))
    return runs


@dataclass
class _Request:
    task_id: TaskId
    inputs: tuple[str, ...]


@dataclass
class _WarmUp:
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


class LlamaEmbeddingEngine:
    """The embedding engine a runner serves: ``load`` → ``warm_up`` → any number of
    ``submit``/``cancel`` → ``unload``. Every submission gets exactly one result on
    ``sink``: :class:`Embeddings`, an :class:`ErrorChunk` or :class:`EmbedCancelled`."""

    def __init__(self, settings: EmbedSettings, sink: EmbedSink) -> None:
        self._settings = settings
        self._sink = sink
        self._embedder: LlamaEmbedder | None = None
        self._queue: queue.SimpleQueue[_Request | _WarmUp | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending: set[TaskId] = set()
        self._cancelled: set[TaskId] = set()

    @property
    def dimensions(self) -> int:
        if self._embedder is None:
            raise RuntimeError("dimensions before load()")
        return self._embedder.dimensions

    def load(self) -> None:
        self._embedder = LlamaEmbedder.open(self._settings)
        self._thread = threading.Thread(target=self._run, name="llama-embed", daemon=True)
        self._thread.start()
        log.info(
            "loaded %s for embeddings: %d dimensions, inputs up to %d tokens, %d threads",
            self._settings.model_path.name,
            self._embedder.dimensions,
            self._settings.context_tokens,
            self._settings.n_threads,
        )

    def warm_up(self) -> None:
        """Embed one short text; blocks until done."""
        order = _WarmUp()
        self._queue.put(order)
        order.done.wait()
        if order.error is not None:
            raise EngineLoadError(order.error)

    def submit(self, task_id: TaskId, inputs: Sequence[str]) -> None:
        if self._thread is None:
            raise RuntimeError("submit() before load()")
        with self._lock:
            if task_id in self._pending:
                refusal: ErrorChunk | None = ErrorChunk(
                    task_id=task_id,
                    code=ERROR_INVALID_REQUEST,
                    message=f"task {task_id} is already running",
                )
            else:
                refusal = None
                self._pending.add(task_id)
        if refusal is not None:
            self._sink(refusal)
            return
        self._queue.put(_Request(task_id, tuple(inputs)))

    def cancel(self, task_id: TaskId) -> None:
        """Stop a queued or running request (it ends with :class:`EmbedCancelled`);
        unknown or finished ids are ignored."""
        with self._lock:
            if task_id in self._pending:
                self._cancelled.add(task_id)

    def unload(self) -> None:
        thread = self._thread
        if thread is not None:
            with self._lock:
                self._cancelled |= self._pending
            self._queue.put(None)
            thread.join()
            self._thread = None
        if self._embedder is not None:
            self._embedder.close()
            self._embedder = None

    # -- the worker thread ---------------------------------------------------

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if isinstance(item, _WarmUp):
                try:
                    self._embed(TaskId("warm-up"), (WARM_UP_TEXT,))
                except Exception as exc:
                    item.error = f"warm-up failed: {exc}"
                item.done.set()
                continue
            try:
                result = self._serve(item)
            except Exception as exc:
                log.exception("embedding task %s failed", item.task_id)
                result = ErrorChunk(
                    task_id=item.task_id,
                    code=ERROR_ENGINE_FAILED,
                    message=f"the embedding engine failed: {exc}",
                )
            with self._lock:
                self._pending.discard(item.task_id)
                self._cancelled.discard(item.task_id)
            self._sink(result)

    def _is_cancelled(self, task_id: TaskId) -> bool:
        with self._lock:
            return task_id in self._cancelled

    def _serve(self, request: _Request) -> EmbedResult:
        task_id = request.task_id
        if not request.inputs:
            return ErrorChunk(task_id=task_id, code=ERROR_INVALID_REQUEST, message="no inputs")
        try:
            return self._embed(task_id, request.inputs)
        except EmbedFailed as exc:
            return ErrorChunk(task_id=task_id, code=ERROR_ENGINE_FAILED, message=str(exc))

    def _embed(self, task_id: TaskId, inputs: Sequence[str]) -> EmbedResult:
        embedder = self._embedder
        assert embedder is not None
        limit = embedder.context_tokens
        tokenized: list[list[int]] = []
        for index, text in enumerate(inputs):
            if self._is_cancelled(task_id):
                return EmbedCancelled(task_id)
            tokens = embedder.tokenize(text)
            if len(tokens) > limit:
                return ErrorChunk(
                    task_id=task_id,
                    code=ERROR_CONTEXT_LENGTH_EXCEEDED,
                    message=f"input {index} is {len(tokens)} tokens long; this model "
                    f"embeds at most {limit} tokens per input",
                )
            tokenized.append(tokens)
        vectors = np.empty((len(inputs), embedder.dimensions), dtype="<f4")
        for run in pack([len(tokens) for tokens in tokenized], limit):
            if self._is_cancelled(task_id):
                return EmbedCancelled(task_id)
            vectors[run.start : run.stop] = embedder.encode(tokenized[run.start : run.stop])
        return Embeddings(
            task_id=task_id,
            vectors=vectors.tobytes(),
            count=len(inputs),
            dimensions=embedder.dimensions,
            prompt_tokens=sum(len(tokens) for tokens in tokenized),
        )
