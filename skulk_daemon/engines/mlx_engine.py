"""The MLX engine: an ``mlx-lm`` model behind the same :class:`Engine` protocol as llama.cpp.

It loads an MLX model directory (safetensors, ``config.json``, tokenizer; 4- or
8-bit quantized as ``mlx-community`` publishes them) with ``mlx_lm.load`` and
serves it from one scheduler thread (:mod:`._mlx_scheduler`) driving mlx-lm's
``BatchGenerator``: continuous batching, per-request samplers and penalties,
stop strings, logprobs, prompt-prefix reuse and cancellation, and the same
``GenerationStats`` as the llama.cpp path. Runs on Metal on Apple Silicon and on
the CPU build of MLX on Linux.

A request with a grammar (a JSON schema or a forced tool call) is held to it by an
llguidance token mask (:mod:`._mlx_grammar`), as llama.cpp's grammar sampler holds it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skulk_core.chat.generation import (
    ERROR_CONTEXT_LENGTH_EXCEEDED,
    ERROR_ENGINE_FAILED,
    ERROR_INVALID_REQUEST,
    ErrorChunk,
    GenerationRequest,
)
from skulk_core.ids import TaskId
from skulk_daemon.engines.base import ChunkSink, EngineLoadError, EngineStats

log = logging.getLogger(__name__)


class MlxSettings:
    """``ring_layers``: this engine is rank 0 of an MLX ring and holds layers
    ``[0, ring_layers)``; the other ranks run ``_mlx_stage.serve_stage``."""

    def __init__(
        self,
        model_dir: Path,
        *,
        context_tokens: int,
        slots: int,
        ring_layers: int | None = None,
    ) -> None:
        if context_tokens < 1 or slots < 1:
            raise ValueError("context_tokens and slots must be positive")
        self.model_dir = model_dir
        self.context_tokens = context_tokens
        # NOTE: a ring's ranks hold one sequence's KV caches (_mlx_ring_generator.py).
        self.slots = 1 if ring_layers is not None else slots
        self.ring_layers = ring_layers


class MlxEngine:
    """See the module docstring. ``sink`` receives every chunk; ``on_fatal`` is
    called once if the engine breaks beyond one request."""

    def __init__(
        self,
        settings: MlxSettings,
        sink: ChunkSink,
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        self._settings = settings
        self._sink = sink
        self._on_fatal = on_fatal
        self._tokenizer: Any = None
        self._scheduler: Any = None
        self._grammars: Any = None
        self._thread: threading.Thread | None = None
        self._ring: Any = None

    def load(self) -> None:
        # NOTE: imported here so a runner reports "loading" before MLX is mapped,
        # and a broken MLX install becomes an EngineLoadError, not a crash.
        try:
            from mlx_lm import load  # noqa: PLC0415

            from skulk_daemon.engines._mlx_grammar import Grammars  # noqa: PLC0415
            from skulk_daemon.engines._mlx_scheduler import Scheduler  # noqa: PLC0415
        except (ImportError, OSError) as exc:
            raise EngineLoadError(f"cannot load MLX: {exc}") from exc
        directory = self._settings.model_dir
        if not (directory / "config.json").is_file():
            raise EngineLoadError(f"{directory} is not an MLX model directory (no config.json)")
        generator: object | None = None
        try:
            if self._settings.ring_layers is not None:
                from skulk_daemon.engines._mlx_ring_generator import load_ring  # noqa: PLC0415
                from skulk_daemon.engines._mlx_stage import StageError  # noqa: PLC0415

                try:
                    model, tokenizer, generator = load_ring(directory, self._settings.ring_layers)
                except StageError as exc:
                    raise EngineLoadError(str(exc)) from exc
                self._ring = model
            else:
                loaded = load(str(directory))
                model, tokenizer = loaded[0], loaded[1]
        except (ValueError, OSError, KeyError, RuntimeError) as exc:
            raise EngineLoadError(f"MLX cannot load {directory.name}: {exc}") from exc
        self._tokenizer = tokenizer
        self._grammars = Grammars(tokenizer)
        self._scheduler = Scheduler(
            model, tokenizer, self._sink, self._settings.slots, self._on_fatal, generator=generator
        )
        self._thread = threading.Thread(
            target=self._scheduler.run, name="mlx-scheduler", daemon=True
        )
        self._thread.start()
        log.info(
            "loaded %s with MLX: %d slots x %d tokens",
            directory.name,
            self._settings.slots,
            self._settings.context_tokens,
        )

    def warm_up(self) -> None:
        from skulk_daemon.engines._mlx_sequences import WarmUp  # noqa: PLC0415

        if self._scheduler is None:
            raise RuntimeError("warm_up() before load()")
        order = WarmUp()
        self._scheduler.post(order)
        order.done.wait()
        if order.error is not None:
            raise EngineLoadError(order.error)

    def unload(self) -> None:
        if self._thread is not None:
            self._scheduler.stop()
            self._thread.join()
            self._thread = None
        if self._ring is not None:
            # The other ranks leave their loops (and their runners end) with this one.
            self._ring.stop()
            self._ring = None
        self._scheduler = None
        self._tokenizer = None

    def stats(self) -> EngineStats:
        scheduler = self._scheduler
        if scheduler is None:
            return EngineStats(
                loaded=False,
                slots=self._settings.slots,
                context_tokens=self._settings.context_tokens,
                active=0,
                waiting=0,
                decode_batches=0,
                prompt_tokens=0,
                generated_tokens=0,
                completed=0,
            )
        counters = scheduler.counters
        return EngineStats(
            loaded=True,
            slots=self._settings.slots,
            context_tokens=self._settings.context_tokens,
            active=len(scheduler.active),
            waiting=len(scheduler.waiting) + len(scheduler.inbox),
            decode_batches=counters.decode_batches,
            prompt_tokens=counters.prompt_tokens,
            cached_tokens=counters.cached_tokens,
            generated_tokens=counters.generated_tokens,
            completed=counters.completed,
        )

    def submit(self, request: GenerationRequest) -> None:
        from skulk_daemon.engines._mlx_sequences import (  # noqa: PLC0415
            Pending,
            refusal,
            token_budget,
        )

        scheduler = self._scheduler
        if scheduler is None:
            raise RuntimeError("submit() before load()")
        task_id = request.task_id
        if scheduler.fatal is not None:
            self._error(task_id, ERROR_ENGINE_FAILED, scheduler.fatal)
            return
        refused = refusal(request.sampling)
        if refused is not None:
            self._error(task_id, ERROR_INVALID_REQUEST, refused)
            return
        matcher = None
        if request.sampling.grammar is not None:
            from skulk_daemon.engines._mlx_grammar import GrammarError  # noqa: PLC0415

            try:
                matcher = self._grammars.matcher(request.sampling.grammar)
            except GrammarError as exc:
                self._error(task_id, ERROR_INVALID_REQUEST, str(exc))
                return
        tokens = self._tokenize(request.prompt)
        if not tokens:
            self._error(task_id, ERROR_INVALID_REQUEST, "the prompt is empty")
            return
        budget = token_budget(len(tokens), request.sampling, self._settings.context_tokens)
        if isinstance(budget, str):
            self._error(task_id, ERROR_CONTEXT_LENGTH_EXCEEDED, budget)
            return
        scheduler.post(Pending(request, tokens, budget, time.perf_counter(), matcher))

    def cancel(self, task_id: TaskId) -> None:
        from skulk_daemon.engines._mlx_sequences import CancelOrder  # noqa: PLC0415

        if self._scheduler is not None:
            self._scheduler.post(CancelOrder(task_id))

    def _tokenize(self, prompt: str) -> list[int]:
        """Special tokens parsed; BOS added only when the text does not start with it
        (the contract of :class:`GenerationRequest`, as llama.cpp tokenizes)."""
        tokenizer = self._tokenizer
        bos = tokenizer.bos_token
        if not prompt:
            return []
        with_bos = not (bos and prompt.startswith(bos))
        tokens: list[int] = tokenizer.encode(prompt, add_special_tokens=with_bos)
        return tokens

    def _error(self, task_id: TaskId, code: str, message: str) -> None:
        self._sink(ErrorChunk(task_id=task_id, code=code, message=message))
