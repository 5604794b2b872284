"""MLX decode: Skulk's MLX engine over HTTP against ``mlx_lm.stream_generate`` in-process.

Both sides run the converted MLX demo (``local/gemma-3-270m-mlx-4bit``) on the same
completion prompt, greedy, ``--max-tokens`` tokens. They run alternately, never at
once, in an ABBA order, each only once the other is idle and checked to stay idle
while it is measured (:mod:`bench._isolation`); after ``--warmup`` discarded pairs,
``--reps`` pairs are measured and their median decode rates compared (tokens after
the first over the time from the first to the last). Target: Skulk/raw decode
ratio >= 0.97.

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
from pathlib import Path
from typing import Final

import httpx

if __package__ in (None, ""):  # `python bench/mlx_decode.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import LoggedDaemon, add_run_options, machine, median, wait_for_quiet
from bench._isolation import Isolation, Side, native_threads

MLX_MODEL: Final = "local/gemma-3-270m-mlx-4bit"
DECODE_RATIO_TARGET: Final = 0.97
PROMPT: Final = "The history of the city of Paris begins"


def raw_decode_tps(model: object, tokenizer: object, max_tokens: int) -> float:
    from mlx_lm import stream_generate  # noqa: PLC0415 (the raw side only)

    first = last = 0.0
    count = 0
    for _ in stream_generate(model, tokenizer, PROMPT, max_tokens=max_tokens):  # type: ignore[arg-type]
        now = time.perf_counter()
        if count == 0:
            first = now
        last = now
        count += 1
    return (count - 1) / (last - first) if count > 1 and last > first else float("nan")


def skulk_decode_tps(client: httpx.Client, url: str, max_tokens: int) -> float:
    body = {
        "model": MLX_MODEL,
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    first = last = 0.0
    count = 0
    with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if not response.is_success:
            response.read()
            raise RuntimeError(f"{response.status_code}: {response.text}")
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            frame = json.loads(line[len("data: ") :])
            for choice in frame.get("choices") or []:
                if choice.get("text"):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    count += 1
    return (count - 1) / (last - first) if count > 1 and last > first else float("nan")


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
            raw: list[float] = []
            skulk: list[float] = []
            process = daemon.process
            assert process is not None
            isolation = Isolation(
                [Side("raw", threads=native_threads()), Side("skulk", lambda: [process.pid])]
            )
            with httpx.Client(timeout=600) as client:
                for rep in range(args.warmup + args.reps):
                    order = ("raw", "skulk") if rep % 2 == 0 else ("skulk", "raw")
                    pair: dict[str, float] = {}
                    for side in order:
                        if side == "raw":
                            pair[side] = isolation.run(
                                side, lambda: raw_decode_tps(model, tokenizer, args.max_tokens)
                            )
                        else:
                            pair[side] = isolation.run(
                                side,
                                lambda: skulk_decode_tps(client, daemon.url, args.max_tokens),
                            )
                    if rep >= args.warmup:
                        raw.append(pair["raw"])
                        skulk.append(pair["skulk"])
        finally:
            daemon.kill()
    ratio = median(skulk) / median(raw)
    print(
        f"MLX decode tok/s: skulk {median(skulk):.2f}, mlx_lm {median(raw):.2f}, "
        f"ratio {ratio:.3f} (target >= {DECODE_RATIO_TARGET}); load {load_avg:.2f}"
    )
    if args.json:
        payload = {
            "bench": "mlx_decode",
            "skulk_tps": skulk,
            "raw_tps": raw,
            "ratio": ratio,
            "isolation": isolation.report(),
            "machine": machine(),
        }
        print(json.dumps(payload, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
