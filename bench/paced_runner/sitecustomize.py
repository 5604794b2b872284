"""A runner whose engine emits tokens at a fixed pace, for ``bench.daemon_tokens --paced``.

On ``PYTHONPATH`` (with ``SKULK_BENCH_PACED_STEPS_S`` set), a runner process
(``SKULK_RUNNER_PARENT_PID`` set) gets this module's :class:`PacedEngine` in place of
llama.cpp: no model is decoded, each active generation gets one token (``" word"``)
every step, ``SKULK_BENCH_PACED_STEPS_S`` steps a second, from one engine thread as
llama.cpp's decode loop does, until its ``max_tokens``. The daemon cannot tell: it
reads the same frames. What the benchmark then measures (the daemon's CPU) no longer
competes with a model for the cores, and the token rate is high enough that the
daemon's idle work is a small part of what is subtracted. Only the daemon's serving
path is measured this way, never decode speed.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import types
from typing import Any


class PacedEngine:
    def __init__(self, settings: object, sink: Any, **_: object) -> None:
        self._sink = sink
        self._step_s = 1.0 / float(os.environ["SKULK_BENCH_PACED_STEPS_S"])
        self._active: dict[Any, list[Any]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def load(self) -> None:
        self._thread.start()

    def warm_up(self) -> None:
        pass

    def submit(self, request: Any) -> None:
        budget = request.sampling.max_tokens or 16
        with self._lock:
            self._active[request.task_id] = [request, budget, 0, time.monotonic()]
        self._wake.set()

    def cancel(self, task_id: Any) -> None:
        with self._lock:
            entry = self._active.pop(task_id, None)
        if entry is not None:
            self._finish(entry, "cancelled")

    def unload(self) -> None:
        self._stopped = True
        self._wake.set()

    def stats(self) -> Any:
        raise NotImplementedError

    def _finish(self, entry: list[Any], reason: str) -> None:
        from skulk_core.chat.generation import FinishChunk, GenerationStats  # noqa: PLC0415

        request, _budget, done, started = entry
        seconds = max(time.monotonic() - started, 1e-6)
        stats = GenerationStats(
            prompt_tps=1.0,
            generation_tps=done / seconds,
            prompt_tokens=1,
            generation_tokens=done,
            serving_batches=False,
            in_flight_at_admission=1,
            time_to_first_token_ms=self._step_s * 1000,
        )
        self._sink(
            FinishChunk(
                task_id=request.task_id,
                finish_reason=reason,  # type: ignore[arg-type]
                prompt_tokens=1,
                completion_tokens=done,
                stats=stats,
            )
        )

    def _loop(self) -> None:
        from skulk_core.chat.generation import TokenChunk  # noqa: PLC0415

        due = time.monotonic()
        while not self._stopped:
            with self._lock:
                entries = list(self._active.values())
            if not entries:
                self._wake.wait()
                self._wake.clear()
                due = time.monotonic()
                continue
            due += self._step_s
            time.sleep(max(0.0, due - time.monotonic()))
            for entry in entries:
                request = entry[0]
                self._sink(TokenChunk(task_id=request.task_id, text=" word", token_id=1))
                entry[2] += 1
                if entry[2] >= entry[1]:
                    with self._lock:
                        gone = self._active.pop(request.task_id, None)
                    if gone is not None:
                        self._finish(entry, "length")


class _Settings:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass


if os.environ.get("SKULK_BENCH_PACED_STEPS_S") and os.environ.get("SKULK_RUNNER_PARENT_PID"):
    _fake = types.ModuleType("skulk_daemon.engines.llama_cpp")
    _fake.LlamaCppEngine = PacedEngine  # type: ignore[attr-defined]
    _fake.LlamaCppSettings = _Settings  # type: ignore[attr-defined]
    _fake.set_llama_logging = lambda **_: None  # type: ignore[attr-defined]
    sys.modules["skulk_daemon.engines.llama_cpp"] = _fake
