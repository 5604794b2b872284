"""The engine's time per token outside ``llama_decode``: what issue #19 item 6 targets.

One stream at a time through Skulk's ``LlamaCppEngine`` in this process. The
engine's model is wrapped so every ``llama_decode`` is timed; the scheduler
thread spends the rest of each token in Python (sampling, detokenizing, stop
handling, the sink). On a single stream the scheduler is the only thread
running between decodes, so

    outside = (time from the first decode to the last) - (time inside decode)

divided by the tokens decoded is the per-token overhead a faster accelerator
would expose (on a GPU a token of this model takes a couple of milliseconds).
It is measured twice: in the scheduler thread's own CPU time
(``time.thread_time``, the target's figure: a busy machine that takes the
core away does not inflate it) and in wall time (which it does).

Three sinks are measured, alternately:

* ``list``: chunks appended to a list (the engine alone),
* ``frames``: chunks encoded as the runner encodes them and written to a pipe
  that a child process drains (the runner's real per-token work: the engine
  thread writes each frame itself),

and three sampling modes: greedy (``temperature`` 0, the argmax path), sampled
(``temperature`` 0.8, ``top_p`` 0.95: the numpy draw of ``_llama_draw``) and
chain (the same request through llama.cpp's own sampler chain, for comparison).

On a loaded machine even thread CPU time is inflated (a vCPU the host takes away
still runs the guest's clock, and neighbours evict the logits from cache), so
``--stub-decode`` measures the loop alone: each request's first decode step is
real, every later one returns at once and leaves those logits in place, so the
same sampling, detokenizing and framing run with no llama.cpp thread competing.

Run from the repository root::

    .venv/bin/python -m bench.token_overhead [--reps 5] [--max-tokens 128] [--json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

if __package__ in (None, ""):  # `python bench/token_overhead.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_PROMPT,
    add_run_options,
    installed_demo_model,
    machine,
    median,
    print_json,
    wait_for_quiet,
)
from bench.single_stream import DEMO_PROMPT
from skulk_core.chat.generation import EngineChunk, GenerationRequest, SamplingParams, TokenChunk
from skulk_core.ids import TaskId
from skulk_daemon.engines import _llama_tokens as engine_module
from skulk_daemon.engines._llama_draw import takes_draw
from skulk_daemon.engines.llama_cpp import LlamaCppEngine, LlamaCppSettings, set_llama_logging
from skulk_daemon.runner.protocol import encode_frame

TARGET_MS: Final = 0.15
MODES: Final = {
    "greedy": SamplingParams(max_tokens=128, temperature=0.0),
    "sampled": SamplingParams(max_tokens=128, temperature=0.8, top_p=0.95, seed=7),
    # The same request through llama.cpp's own sampler chain (what every sampled
    # request took before the numpy draw), for the before/after in one run.
    "chain": SamplingParams(max_tokens=128, temperature=0.8, top_p=0.95, seed=7),
}


@dataclass
class Round:
    tokens: int = 0
    first_decode: float = 0.0
    last_decode_end: float = 0.0
    in_decode: float = 0.0
    decodes: int = 0
    first_cpu: float = 0.0
    last_cpu: float = 0.0
    in_decode_cpu: float = 0.0
    steps: int = 0

    def outside_ms_per_token(self) -> float:
        span = self.last_decode_end - self.first_decode
        return (span - self.in_decode) * 1000.0 / max(self.decodes, 1)

    def outside_cpu_ms_per_token(self) -> float:
        span = self.last_cpu - self.first_cpu
        return (span - self.in_decode_cpu) * 1000.0 / max(self.decodes, 1)


@dataclass
class Figures:
    outside_ms: list[float] = field(default_factory=list)
    outside_cpu_ms: list[float] = field(default_factory=list)
    decode_ms: list[float] = field(default_factory=list)


class Harness:
    """The engine with a timed ``llama_decode`` and a switchable sink."""

    def __init__(self, model: Path, context: int, *, stub: bool = False) -> None:
        set_llama_logging(verbose=False)
        self._done = threading.Event()
        self._round = Round()
        self._deliver: Callable[[EngineChunk], None] = lambda _chunk: None
        self.engine = LlamaCppEngine(LlamaCppSettings(model, context_tokens=context), self._sink)
        self.engine.load()
        self.engine.warm_up()
        llama = self.engine._llama
        assert llama is not None
        decode = llama.decode

        def timed(n_tokens: int) -> int:
            cpu_start = time.thread_time()
            start = time.perf_counter()
            # Stubbed: the logits of the request's first real step stay in place.
            skip = stub and n_tokens == 1 and self._round.steps > 0
            status = 0 if skip else decode(n_tokens)
            if n_tokens == 1:
                self._round.steps += 1
            end = time.perf_counter()
            cpu_end = time.thread_time()
            round_ = self._round
            if round_.decodes == 0:
                round_.first_decode = start
                round_.first_cpu = cpu_start
            round_.decodes += 1
            round_.in_decode += end - start
            round_.in_decode_cpu += cpu_end - cpu_start
            round_.last_decode_end = end
            round_.last_cpu = cpu_end
            return status

        llama.decode = timed  # type: ignore[method-assign]
        self._drain = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        assert self._drain.stdin is not None
        self._pipe = self._drain.stdin
        self._n = 0

    def _sink(self, chunk: EngineChunk) -> None:
        if isinstance(chunk, TokenChunk):
            self._round.tokens += 1
        self._deliver(chunk)
        if not isinstance(chunk, TokenChunk):
            self._done.set()

    def run(self, prompt: str, sampling: SamplingParams, sink: str, *, chain: bool) -> Round:
        # NOTE: the engine asks this module-level function (``_llama_tokens``') whether
        # a request takes the numpy draw; the chain case answers no for it.
        engine_module.takes_draw = (lambda _params: False) if chain else takes_draw
        kept: list[EngineChunk] = []
        if sink == "list":
            self._deliver = kept.append
        else:
            pipe = self._pipe

            def write(chunk: EngineChunk) -> None:
                pipe.write(encode_frame(chunk))
                pipe.flush()

            self._deliver = write
        self._n += 1
        self._round = Round()
        self._done.clear()
        task = TaskId(f"overhead-{self._n}")
        request = GenerationRequest(task_id=task, prompt=prompt, sampling=sampling)
        self.engine.submit(request)
        self._done.wait()
        # The first decode is the prompt's: leave it out of the per-token figures.
        return self._round

    def close(self) -> None:
        self.engine.unload()
        self._pipe.close()
        self._drain.wait()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    model = installed_demo_model(args.models_dir, args.context)
    prompt = DEMO_PROMPT.format(prompt=args.prompt)
    harness = Harness(model, args.context, stub=args.stub_decode)
    figures: dict[str, Figures] = {}
    try:
        cases = [(mode, sink) for mode in MODES for sink in ("list", "frames")]
        for mode, sink in cases:  # warm-up
            harness.run(prompt, MODES[mode], sink, chain=mode == "chain")
        for rep in range(args.reps):
            for mode, sink in cases[:: -1 if rep % 2 else 1]:
                sampling = MODES[mode]
                sampling = SamplingParams(
                    max_tokens=args.max_tokens,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    seed=sampling.seed,
                )
                round_ = harness.run(prompt, sampling, sink, chain=mode == "chain")
                got = figures.setdefault(f"{mode}/{sink}", Figures())
                got.outside_ms.append(round_.outside_ms_per_token())
                got.outside_cpu_ms.append(round_.outside_cpu_ms_per_token())
                got.decode_ms.append(round_.in_decode * 1000.0 / max(round_.decodes, 1))
    finally:
        harness.close()
    return {
        name: {
            "outside_ms_per_token": round(median(f.outside_ms), 4),
            "outside_cpu_ms_per_token": round(median(f.outside_cpu_ms), 4),
            "decode_ms_per_token": round(median(f.decode_ms), 3),
        }
        for name, f in figures.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument(
        "--stub-decode",
        action="store_true",
        help="after each request's first step, skip llama_decode (its logits stay): "
        "the loop's own cost, with no llama.cpp thread competing for the core",
    )
    add_run_options(parser)
    args = parser.parse_args(argv)
    load = wait_for_quiet(args.max_load)
    result = measure(args)
    print(f"per token outside llama_decode (target: CPU <= {TARGET_MS} ms):")
    for name, row in result.items():
        print(
            f"  {name:16} CPU {row['outside_cpu_ms_per_token']:.3f} ms   "
            f"wall {row['outside_ms_per_token']:.3f} ms   "
            f"decode {row['decode_ms_per_token']:.2f} ms"
        )
    if args.json:
        print_json({"machine": machine(), "load": load, "pid": os.getpid(), "result": result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
