"""Skulk's llama.cpp engine against raw llama-cpp-python, in one process, per decode step.

``single_stream.py`` compares the peer with Skulk over HTTP, where the runner's
rate also carries what the daemon and the HTTP client cost on the same cores.
This one takes them away: the engine (``LlamaCppEngine``, configured as the
daemon configures a runner: 4 slots, the prompt cache on, replies reused, each
chunk encoded as the runner encodes it and written to a pipe a child drains)
and the raw side of ``single_stream`` (``RawLlama``, the same ``n_threads``,
``n_batch``, ``n_ubatch`` and flash attention) run alternately in one process,
ABBA, on the same prompts, greedy, ``--max-tokens`` tokens. Each side's
``llama_decode`` is timed, so every step splits into

* decode: the time inside ``llama_decode`` (llama.cpp's work; the same model and
  settings on both sides, so equal but for the context's layout);
* outside: the rest of the step, the loop's own cost (raw: llama-cpp-python's
  ``generate``, its sampler over the whole vocabulary and ``detokenize``;
  Skulk: the scheduler, the argmax, the text stream and the frame).

Both are per step over the steps between the first and the last token, the span
``single_stream`` turns into tokens/s. A gap in decode tokens/s that this run does not
show comes from outside the runner's loop: the daemon's and the client's CPU
competing with llama.cpp's threads for the same cores.

Run from the repository root::

    .venv/bin/python -m bench.engine_vs_raw [--reps 7] [--max-tokens 128] [--json]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

if __package__ in (None, ""):  # `python bench/engine_vs_raw.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_PROMPT,
    add_run_options,
    cpu_count,
    installed_demo_model,
    machine,
    median,
    print_json,
    wait_for_quiet,
)
from bench._isolation import spread_text
from bench.single_stream import DEMO_PROMPT, RawLlama
from skulk_core.chat.generation import EngineChunk, GenerationRequest, SamplingParams, TokenChunk
from skulk_core.ids import TaskId
from skulk_daemon.engines.base import DEFAULT_SLOTS
from skulk_daemon.engines.llama_cpp import LlamaCppEngine, LlamaCppSettings, set_llama_logging
from skulk_daemon.runner.protocol import encode_frame

PROMPT_CACHE_BYTES: Final = 512 * 1024**2  # the daemon's default prompt_cache_mb


@dataclass
class Timeline:
    """When each ``llama_decode`` ran and when each token came out, in ns."""

    decodes: list[tuple[int, int]] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def step(self) -> tuple[float, float, float]:
        """Decode tokens/s, and the decode and outside µs of a step, between the
        first token and the last."""
        first, last = self.tokens[0], self.tokens[-1]
        steps = len(self.tokens) - 1
        inside = sum(end - start for start, end in self.decodes if start >= first and end <= last)
        span = last - first
        return steps / span * 1e9, inside / steps / 1e3, (span - inside) / steps / 1e3


def timed(decode: Callable[..., Any], timeline: Callable[[], Timeline]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        start = time.perf_counter_ns()
        status = decode(*args)
        timeline().decodes.append((start, time.perf_counter_ns()))
        return status

    return run


class RawSide:
    def __init__(self, model: Path, context: int) -> None:
        self.raw = RawLlama(model, context)
        self.timeline = Timeline()
        ctx = self.raw.llm._ctx
        ctx.decode = timed(ctx.decode, lambda: self.timeline)  # type: ignore[method-assign]
        self._detokenize = self.raw.llm.detokenize

        def detokenize(tokens: list[int], *args: Any, **kwargs: Any) -> bytes:
            # RawLlama detokenizes each token as it comes: that is its stamp.
            self.timeline.tokens.append(time.perf_counter_ns())
            return self._detokenize(tokens, *args, **kwargs)

        self.raw.llm.detokenize = detokenize  # type: ignore[method-assign]

    def run(self, prompt: str, max_tokens: int) -> tuple[Timeline, str]:
        self.timeline = Timeline()
        sample = self.raw.run(prompt, max_tokens)
        return self.timeline, sample.text


class SkulkSide:
    def __init__(self, model: Path, context: int) -> None:
        set_llama_logging(verbose=False)
        self.timeline = Timeline()
        self._done = threading.Event()
        self._text: list[str] = []
        self._stamps: list[tuple[int, int]] = []
        self._drain = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        assert self._drain.stdin is not None
        self._pipe = self._drain.stdin
        settings = LlamaCppSettings(
            model,
            context_tokens=context,
            slots=DEFAULT_SLOTS,
            n_threads=cpu_count(),
            prompt_cache_bytes=PROMPT_CACHE_BYTES,
            reuse_replies=True,
        )
        self.engine = LlamaCppEngine(settings, self._sink)
        self.engine.load()
        self.engine.warm_up()
        llama = self.engine._llama
        assert llama is not None
        llama.decode = timed(llama.decode, lambda: self.timeline)  # type: ignore[method-assign]
        self._n = 0

    def _sink(self, chunk: EngineChunk) -> None:
        # The runner's own per-token work: the frame, written to the parent's pipe.
        self._pipe.write(encode_frame(chunk))
        self._pipe.flush()
        if isinstance(chunk, TokenChunk):
            self._stamps.append((time.perf_counter_ns(), chunk.token_id))
            self._text.append(chunk.text)
        else:
            self._done.set()

    def run(self, prompt: str, max_tokens: int) -> tuple[Timeline, str]:
        self.timeline = Timeline()
        self._text = []
        self._stamps = []
        self._done.clear()
        self._n += 1
        sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        task = TaskId(f"engine-vs-raw-{self._n}")
        self.engine.submit(GenerationRequest(task_id=task, prompt=prompt, sampling=sampling))
        self._done.wait()
        llama = self.engine._llama
        assert llama is not None
        # An end-of-generation token is a chunk here; the raw side stops before it.
        self.timeline.tokens = [stamp for stamp, token in self._stamps if not llama.piece(token)[1]]
        return self.timeline, "".join(self._text)

    def close(self) -> None:
        self.engine.unload()
        self._pipe.close()
        self._drain.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--context", type=int, default=1024, help="context tokens per sequence")
    parser.add_argument("--reps", type=int, default=7, help="measured pairs")
    parser.add_argument("--warmup", type=int, default=1, help="discarded pairs first")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between runs")
    add_run_options(parser)
    args = parser.parse_args(argv)
    model = installed_demo_model(args.models_dir, args.context)
    load_at_start = wait_for_quiet(args.max_load)
    skulk = SkulkSide(model, args.context)
    sides: dict[str, RawSide | SkulkSide] = {"raw": RawSide(model, args.context), "skulk": skulk}
    rows: dict[str, list[tuple[float, float, float]]] = {"raw": [], "skulk": []}
    same_text: list[bool] = []
    try:
        for rep in range(args.warmup + args.reps):
            prompt = DEMO_PROMPT.format(prompt=f"Story {rep + 1}. {args.prompt}")
            order = ["raw", "skulk"] if rep % 2 == 0 else ["skulk", "raw"]
            texts: dict[str, str] = {}
            figures: dict[str, tuple[float, float, float]] = {}
            for name in order:
                time.sleep(args.gap)
                timeline, texts[name] = sides[name].run(prompt, args.max_tokens)
                figures[name] = timeline.step()
            print(
                f"rep {rep + 1}/{args.warmup + args.reps}"
                f"{' (warm-up)' if rep < args.warmup else ''}: "
                + " | ".join(
                    f"{name} {tps:.2f} tok/s, decode {inside:.0f} us, outside {outside:.0f} us"
                    for name, (tps, inside, outside) in figures.items()
                ),
                file=sys.stderr,
            )
            if rep >= args.warmup:
                for name, figure in figures.items():
                    rows[name].append(figure)
                same_text.append(texts["raw"] == texts["skulk"])
    finally:
        skulk.close()
    result: dict[str, Any] = {"benchmark": "engine_vs_raw", "reps": args.reps}
    for name, figures_ in rows.items():
        result[f"{name}_decode_tps"] = round(median([f[0] for f in figures_]), 2)
        result[f"{name}_decode_us"] = round(median([f[1] for f in figures_]), 1)
        result[f"{name}_outside_us"] = round(median([f[2] for f in figures_]), 1)
        result[f"{name}_decode_tps_all"] = [round(f[0], 2) for f in figures_]
    ratios = [s[0] / r[0] for r, s in zip(rows["raw"], rows["skulk"], strict=True)]
    result["decode_ratio"] = round(result["skulk_decode_tps"] / result["raw_decode_tps"], 4)
    result["decode_ratio_paired"] = round(median(ratios), 4)
    result["same_text"] = same_text
    result.update(load_at_start=round(load_at_start, 2), machine=machine(), threads=cpu_count())
    print(f"{'':28}{'raw llama-cpp-python':>22}{'Skulk engine':>14}")
    for label, key, fmt in (
        ("decode tok/s (median)", "decode_tps", ".2f"),
        ("in llama_decode, us/step", "decode_us", ".0f"),
        ("outside it, us/step", "outside_us", ".0f"),
    ):
        print(f"{label:28}{result[f'raw_{key}']:>22{fmt}}{result[f'skulk_{key}']:>14{fmt}}")
    print(
        f"Skulk / raw: {result['decode_ratio']:.3f}x "
        f"(per pair {result['decode_ratio_paired']:.3f}x);"
        f" spread, tok/s: raw {spread_text(result['raw_decode_tps_all'])}, "
        f"Skulk {spread_text(result['skulk_decode_tps_all'])}; load at start {load_at_start:.2f};"
        f" same text in {sum(same_text)}/{len(same_text)} pairs"
    )
    if args.json:
        print_json(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
