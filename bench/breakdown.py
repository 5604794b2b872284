"""Where Skulk's serving time goes: the same streams measured layer by layer.

In one run, alternately, at each level N (default 1, 4, 8 concurrent streams):

* ``engine``: Skulk's ``LlamaCppEngine`` in this process, chunks to a list: the
  scheduler loop and llama.cpp alone.
* ``runner``: the runner subprocess (``python -m skulk_daemon.runner``) driven
  through ``RunnerProcess`` as the daemon drives it: adds the stdin/stdout IPC.
* ``http``: the whole daemon over the streaming HTTP API: adds the API, the
  worker supervisor and SSE framing.
* ``llama-server`` (when built): the peer of bench/concurrency.py.

For each it prints the aggregate decode tokens/s (as bench/concurrency.py
computes it) and the CPU milliseconds each process spent per generated token.
On a small machine every CPU millisecond the serving processes spend outside
llama.cpp is taken from llama.cpp's own threads, so the per-token CPU figures
say which layer costs what. Diagnostic only: no targets.

Run from the repository root::

    .venv/bin/python -m bench.breakdown [--levels 1 4 8] [--reps 2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import psutil

if __package__ in (None, ""):  # `python bench/breakdown.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    BUILD_DIR,
    DEFAULT_PROMPT,
    add_run_options,
    chat_body,
    demo_model_path,
    machine,
    median,
    print_json,
    skulk_serving,
    stream_chat_async,
    wait_for_quiet,
)
from bench.concurrency import DEFAULT_LLAMA_SERVER, SLOTS, llama_server
from bench.single_stream import DEMO_PROMPT
from skulk_core.chat.generation import EngineChunk, GenerationRequest, SamplingParams, TokenChunk
from skulk_core.ids import TaskId
from skulk_daemon.engines.llama_cpp import LlamaCppEngine, LlamaCppSettings, set_llama_logging
from skulk_daemon.runner.client import RunnerProcess
from skulk_daemon.runner.protocol import Load

LAYERS: Final = ("engine", "runner", "http", "llama-server")


@dataclass
class Tokens:
    """Token arrival times per stream for one round."""

    times: dict[str, list[float]] = field(default_factory=dict)

    def add(self, stream: str, at: float) -> None:
        self.times.setdefault(stream, []).append(at)

    @property
    def count(self) -> int:
        return sum(len(t) for t in self.times.values())

    def agg_decode_tps(self) -> float:
        first = min(t[0] for t in self.times.values())
        last = max(t[-1] for t in self.times.values())
        return sum(len(t) - 1 for t in self.times.values()) / (last - first)


@dataclass
class Measured:
    tps: list[float] = field(default_factory=list)
    cpu_ms_per_token: dict[str, list[float]] = field(default_factory=dict)


def _cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


class EngineLayer:
    def __init__(self, model: Path, context: int) -> None:
        set_llama_logging(verbose=False)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._tokens = Tokens()
        self._open = 0
        self.engine = LlamaCppEngine(
            LlamaCppSettings(model, context_tokens=context, slots=SLOTS), self._sink
        )
        self.engine.load()
        self.engine.warm_up()
        self._round = 0

    def _sink(self, chunk: EngineChunk) -> None:
        now = time.perf_counter()
        with self._lock:
            if isinstance(chunk, TokenChunk):
                self._tokens.add(chunk.task_id, now)
                return
            self._open -= 1
            if self._open == 0:
                self._done.set()

    def run(self, prompt: str, max_tokens: int, streams: int) -> Tokens:
        self._round += 1
        self._tokens = Tokens()
        self._done.clear()
        self._open = streams
        sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        for i in range(streams):
            task = TaskId(f"bench-{self._round}-{i}")
            self.engine.submit(GenerationRequest(task_id=task, prompt=prompt, sampling=sampling))
        self._done.wait()
        return self._tokens


async def runner_round(runner: RunnerProcess, prompt: str, max_tokens: int, n: int) -> Tokens:
    tokens = Tokens()
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    stamp = time.perf_counter_ns()

    async def one(i: int) -> None:
        task = TaskId(f"bench-{stamp}-{i}")
        request = GenerationRequest(task_id=task, prompt=prompt, sampling=sampling)
        async for chunk in runner.generate(request):
            if isinstance(chunk, TokenChunk):
                tokens.add(task, time.perf_counter())

    await asyncio.gather(*(one(i) for i in range(n)))
    return tokens


async def http_round(url: str, body: dict[str, Any], n: int) -> Tokens:
    """Token times of ``n`` concurrent streams (first and last token per stream)."""
    tokens = Tokens()
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(timeout=600.0, limits=limits) as client:
        timings = await asyncio.gather(*(stream_chat_async(client, url, body) for _ in range(n)))
    for i, timing in enumerate(timings):
        # Spread the stream's tokens over its first..last span: only the count,
        # the first and the last time enter the aggregate.
        count = timing.tokens
        for k in range(count):
            frac = k / (count - 1) if count > 1 else 0.0
            at = timing.first_token_at + frac * (timing.last_token_at - timing.first_token_at)
            tokens.add(str(i), at)
    return tokens


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    model_dir: Path = args.models_dir
    prompt = DEMO_PROMPT.format(prompt=args.prompt)  # what the daemon's template renders
    body = chat_body(args.prompt, args.max_tokens)
    results: dict[str, dict[int, Measured]] = {}
    with skulk_serving(model_dir, args.context) as daemon:
        assert daemon.process is not None
        daemon_pid = daemon.process.pid
        daemon_runner = psutil.Process(daemon_pid).children(recursive=True)[0].pid
        model = demo_model_path(model_dir)
        engine = EngineLayer(model, args.context)
        runner = await RunnerProcess.start(
            Load(model_path=str(model), context_tokens=args.context, slots=SLOTS),
            lambda _phase: None,
        )
        me = os.getpid()
        layers: dict[str, tuple[Callable[[int], Awaitable[Tokens]], dict[str, int]]] = {
            "engine": (
                lambda n: asyncio.to_thread(engine.run, prompt, args.max_tokens, n),
                {"bench (engine)": me},
            ),
            "runner": (
                lambda n: runner_round(runner, prompt, args.max_tokens, n),
                {"bench (client)": me, "runner": runner.pid},
            ),
            "http": (
                lambda n: http_round(daemon.url, body, n),
                {"bench (client)": me, "daemon": daemon_pid, "runner": daemon_runner},
            ),
        }
        server_binary: Path = args.llama_server
        with contextlib.ExitStack() as stack:
            stack.callback(engine.engine.unload)
            if args.have_server:
                log = BUILD_DIR / "logs" / "breakdown-server.log"
                server_url = stack.enter_context(
                    llama_server(server_binary, model, args.context, log)
                )
                server_pid = next(
                    p.pid for p in psutil.Process(me).children() if p.name() == "llama-server"
                )
                layers["llama-server"] = (
                    lambda n: http_round(server_url, body, n),
                    {"bench (client)": me, "llama-server": server_pid},
                )
            else:
                print(f"{server_binary} not built: skipping llama-server", file=sys.stderr)
            try:
                for run, _ in layers.values():  # warm-up
                    await run(max(args.levels))
                for rep in range(args.reps):
                    for level in args.levels:
                        names = list(layers)[:: -1 if rep % 2 else 1]  # ABBA across reps
                        for name in names:
                            run, pids = layers[name]
                            before = {label: _cpu_s(pid) for label, pid in pids.items()}
                            tokens = await run(level)
                            after = {label: _cpu_s(pid) for label, pid in pids.items()}
                            measured = results.setdefault(name, {}).setdefault(level, Measured())
                            measured.tps.append(tokens.agg_decode_tps())
                            for label in pids:
                                ms = (after[label] - before[label]) * 1000.0 / tokens.count
                                measured.cpu_ms_per_token.setdefault(label, []).append(ms)
                            print(
                                f"rep {rep + 1} {level} streams {name}: "
                                f"{tokens.agg_decode_tps():.1f} tok/s",
                                file=sys.stderr,
                            )
            finally:
                await runner.shutdown()
    return {
        name: {
            str(level): {
                "agg_tps": round(median(m.tps), 2),
                "cpu_ms_per_token": {
                    label: round(median(v), 2) for label, v in m.cpu_ms_per_token.items()
                },
            }
            for level, m in by_level.items()
        }
        for name, by_level in results.items()
    }


def print_table(result: dict[str, Any], levels: list[int]) -> None:
    for level in levels:
        print(f"{level} stream(s):")
        for name in LAYERS:
            row = result.get(name, {}).get(str(level))
            if row is None:
                continue
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in row["cpu_ms_per_token"].items())
            print(f"  {name:13}{row['agg_tps']:>8.2f} tok/s   CPU ms/token: {cpu}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    add_run_options(parser)
    args = parser.parse_args(argv)
    args.have_server = args.llama_server.exists()
    load_at_start = wait_for_quiet(args.max_load)
    result = asyncio.run(measure(args))
    print_table(result, args.levels)
    if args.json:
        print_json(
            {
                "benchmark": "breakdown",
                "layers": result,
                "machine": machine(),
                "load_at_start": round(load_at_start, 2),
            }
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
