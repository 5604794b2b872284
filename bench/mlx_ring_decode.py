"""MLX ring decode: the converted demo split over a two-rank ``MlxRing`` against the
same model on one runner.

Measured one side after the other (see the note in :func:`main`), each after the
load average falls to ``--max-load``.

Three real runners (``python -m skulk_daemon.runner``) on this machine: one holds
the whole model; two hold half of its layers each and talk over MLX's ring backend
through the cluster's gates (each in its own network namespace, as on two nodes;
here the "network" is loopback, so the figure is the ring's per-token protocol and
relay cost, not a LAN's latency). Each side decodes ``--max-tokens`` greedy tokens
of the same prompt; the medians of the decode rates (tokens after the first
over the time from the first to the last) are compared.

Run from the repository root::

    .venv/bin/python -m bench.mlx_ring_decode [--reps 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO, Final, cast

if __package__ in (None, ""):  # `python bench/mlx_ring_decode.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import add_run_options, machine, median, wait_for_quiet
from skulk_core.chat.generation import FinishChunk, GenerationRequest, SamplingParams, TokenChunk
from skulk_core.ids import TaskId
from skulk_daemon.runner.protocol import (
    Failed,
    Generate,
    Load,
    MlxRingLeg,
    Phase,
    RunnerMessage,
    Shutdown,
    decode_runner_message,
    encode_frame,
    read_frame,
)

ROOT: Final = Path(__file__).resolve().parent.parent
PROMPT: Final = "The history of the city of Paris begins"


class Runner:
    def __init__(self, load: Load) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "skulk_daemon.runner"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.send(load)

    def send(self, message: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(encode_frame(message))  # type: ignore[arg-type]
        self.process.stdin.flush()

    def next(self) -> RunnerMessage:
        body = read_frame(cast(BinaryIO, self.process.stdout))
        if body is None:
            raise RuntimeError("a runner exited")
        message = decode_runner_message(body)
        if isinstance(message, Failed):
            raise RuntimeError(message.message)
        return message

    def wait_ready(self) -> None:
        while not (isinstance(m := self.next(), Phase) and m.phase == "ready"):
            pass

    def decode_tps(self, max_tokens: int) -> float:
        task = TaskId("bench-" + os.urandom(4).hex())
        sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        self.send(
            Generate(request=GenerationRequest(task_id=task, prompt=PROMPT, sampling=sampling))
        )
        stamps: list[float] = []
        while True:
            message = self.next()
            if isinstance(message, TokenChunk):
                stamps.append(time.perf_counter())
            elif isinstance(message, FinishChunk):
                break
        if len(stamps) < 2 or stamps[-1] <= stamps[0]:
            return float("nan")
        return (len(stamps) - 1) / (stamps[-1] - stamps[0])

    def stop(self) -> None:
        try:
            self.send(Shutdown())
            self.process.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(parser)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    found = sorted(args.models_dir.glob("local--gemma-3-270m-mlx-4bit*/config.json"))
    if not found:
        print(f"no MLX demo under {args.models_dir}; add it first", file=sys.stderr)
        return 1
    model = found[0].parent
    layers = int(json.loads(found[0].read_text())["num_hidden_layers"])
    half = layers // 2
    endpoints = (f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")
    key = os.urandom(32)
    legs = [
        MlxRingLeg(
            instance_id="bench-ring",
            gate_key=key,
            rank=rank,
            nodes=("bench-rank-0", "bench-rank-1"),
            endpoints=endpoints,
            start_layer=start,
            end_layer=end,
        )
        for rank, (start, end) in enumerate([(0, half), (half, layers)])
    ]
    # NOTE: one side after the other, not alternately: a ring rank waiting in MLX's
    # ring recv spins (about half a core, measured), so an idle ring would slow the
    # other side on the same machine.
    results: dict[str, list[float]] = {"one": [], "ring": []}
    loads: dict[str, float] = {}
    for side in ("one", "ring"):
        if side == "one":
            runners = [
                Runner(Load(model_path=str(model), context_tokens=512, engine="mlx", slots=1))
            ]
        else:
            runners = [
                Runner(Load(model_path=str(model), context_tokens=512, engine="mlx", ring=leg))
                for leg in legs
            ]
        try:
            for runner in runners:
                runner.wait_ready()
            loads[side] = wait_for_quiet(args.max_load)
            for rep in range(args.warmup + args.reps):
                tps = runners[0].decode_tps(args.max_tokens)
                if rep >= args.warmup:
                    results[side].append(tps)
        finally:
            for runner in runners:
                runner.stop()
    ratio = median(results["ring"]) / median(results["one"])
    print(
        f"MLX decode tok/s: two-rank ring {median(results['ring']):.2f}, one runner "
        f"{median(results['one']):.2f}, ratio {ratio:.3f}; load {loads}"
    )
    if args.json:
        payload = {
            "bench": "mlx_ring_decode",
            "ring_tps": results["ring"],
            "one_tps": results["one"],
            "ratio": ratio,
            "load_1m": loads,
            "machine": machine(),
        }
        print(json.dumps(payload, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
