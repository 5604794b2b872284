"""MLX decode: Skulk's MLX engine over HTTP against ``mlx_lm.stream_generate`` in-process.

Both sides run the converted MLX demo (``local/gemma-3-270m-mlx-4bit``) on the same
completion prompt, greedy, ``--max-tokens`` tokens. They run alternately, never at
once, in an ABBA order, each only once the other is idle and checked to stay idle
while it is measured (:mod:`bench._isolation`); after ``--warmup`` discarded pairs,
``--reps`` pairs are measured and their median decode rates compared (tokens after
the first over the time from the first to the last). Target: Skulk/raw decode
ratio >= 0.97.

Wall-clock rates move with whatever else the machine runs, so each side's CPU time
per decoded token is reported too (over the same span: Skulk's daemon and runner
processes, the raw side's whole process), which the load hardly moves.

The MLX demo must be installed in ``--models-dir`` first
(``skulk models add local/gemma-3-270m-mlx-4bit``, or any test session's fixture).

Run from the repository root::

    .venv/bin/python -m bench.mlx_decode [--reps 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import httpx

if __package__ in (None, ""):  # `python bench/mlx_decode.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import LoggedDaemon, add_run_options, machine, median, wait_for_quiet
from bench._isolation import Isolation, daemon_side, in_process_side

MLX_MODEL: Final = "local/gemma-3-270m-mlx-4bit"
DECODE_RATIO_TARGET: Final = 0.97
PROMPT: Final = "The history of the city of Paris begins"


class Decode:
    """One side's decode: tokens after the first over the time from the first to the
    last, and the CPU its processes spent over the same span per such token."""

    def __init__(self, tps: float, cpu_ms_per_token: float) -> None:
        self.tps = tps
        self.cpu_ms_per_token = cpu_ms_per_token


def _decode(count: int, first: float, last: float, cpu: float) -> Decode:
    if count < 2 or last <= first:
        return Decode(float("nan"), float("nan"))
    return Decode((count - 1) / (last - first), cpu * 1000 / (count - 1))


def raw_decode(model: object, tokenizer: object, max_tokens: int) -> Decode:
    """``mlx_lm.stream_generate`` here; CPU is this whole process's (MLX's threads
    and the Python loop alike)."""
    from mlx_lm import stream_generate  # noqa: PLC0415 (the raw side only)

    first = last = cpu_first = 0.0
    count = 0
    for _ in stream_generate(model, tokenizer, PROMPT, max_tokens=max_tokens):  # type: ignore[arg-type]
        now = time.perf_counter()
        if count == 0:
            first = now
            cpu_first = time.process_time()
        last = now
        count += 1
    return _decode(count, first, last, time.process_time() - cpu_first)


def skulk_decode(
    client: httpx.Client, url: str, max_tokens: int, cpu: Callable[[], float]
) -> Decode:
    """Streamed from the daemon; CPU is the daemon's and its runner's (``cpu()``).
    Tokens are counted by ``usage`` (a chunk may carry no text)."""
    body = {
        "model": MLX_MODEL,
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    first = last = cpu_first = 0.0
    texts = 0
    tokens: int | None = None
    with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if not response.is_success:
            response.read()
            raise RuntimeError(f"{response.status_code}: {response.text}")
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            frame = json.loads(line[len("data: ") :])
            usage = frame.get("usage")
            if usage:
                tokens = int(usage["completion_tokens"])
            for choice in frame.get("choices") or []:
                if choice.get("text"):
                    now = time.perf_counter()
                    if not texts:
                        first = now
                        cpu_first = cpu()
                    last = now
                    texts += 1
    return _decode(texts if tokens is None else tokens, first, last, cpu() - cpu_first)


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
    from mlx_lm import load  # noqa: PLC0415

    loaded = load(str(found[0].parent))
    model, tokenizer = loaded[0], loaded[1]
    with tempfile.TemporaryDirectory(prefix="skulk-bench-mlx-") as root:
        daemon = LoggedDaemon(root=Path(root), models_dir=args.models_dir)
        try:
            daemon.start()
            placed = httpx.post(
                f"{daemon.url}/place_instance",
                json={"model_id": MLX_MODEL, "context_tokens": 512},
                timeout=60,
            )
            placed.raise_for_status()
            instance_id = placed.json()["instance_id"]
            deadline = time.monotonic() + 600
            while daemon.runner_status(instance_id) != "RunnerReady":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the MLX runner never came up\n{daemon.log_tail()}")
                time.sleep(0.5)
            load_avg = wait_for_quiet(args.max_load)
            raw: list[Decode] = []
            skulk: list[Decode] = []
            served = daemon_side("skulk", daemon.process)
            isolation = Isolation([in_process_side("raw"), served])
            with httpx.Client(timeout=600) as client:
                for rep in range(args.warmup + args.reps):
                    order = ("raw", "skulk") if rep % 2 == 0 else ("skulk", "raw")
                    pair: dict[str, Decode] = {}
                    for side in order:
                        if side == "raw":
                            pair[side] = isolation.run(
                                side, lambda: raw_decode(model, tokenizer, args.max_tokens)
                            )
                        else:
                            pair[side] = isolation.run(
                                side,
                                lambda: skulk_decode(
                                    client, daemon.url, args.max_tokens, served.cpu_seconds
                                ),
                            )
                    if rep >= args.warmup:
                        raw.append(pair["raw"])
                        skulk.append(pair["skulk"])
        finally:
            daemon.kill()
    skulk_tps = median([d.tps for d in skulk])
    raw_tps = median([d.tps for d in raw])
    skulk_cpu = median([d.cpu_ms_per_token for d in skulk])
    raw_cpu = median([d.cpu_ms_per_token for d in raw])
    ratio = skulk_tps / raw_tps
    print(
        f"MLX decode tok/s: skulk {skulk_tps:.2f}, mlx_lm {raw_tps:.2f}, "
        f"ratio {ratio:.3f} (target >= {DECODE_RATIO_TARGET}); load {load_avg:.2f}\n"
        f"CPU ms per decoded token: skulk {skulk_cpu:.1f} (daemon + runner), "
        f"mlx_lm {raw_cpu:.1f} (its process); ratio {raw_cpu / skulk_cpu:.3f}"
    )
    if args.json:
        payload = {
            "bench": "mlx_decode",
            "skulk_tps": [d.tps for d in skulk],
            "raw_tps": [d.tps for d in raw],
            "skulk_cpu_ms_per_token": [d.cpu_ms_per_token for d in skulk],
            "raw_cpu_ms_per_token": [d.cpu_ms_per_token for d in raw],
            "ratio": ratio,
            "cpu_ratio": raw_cpu / skulk_cpu,
            "isolation": isolation.report(),
            "machine": machine(),
        }
        print(json.dumps(payload, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
