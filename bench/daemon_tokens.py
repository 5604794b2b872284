"""The CPU one daemon spends on each token it streams, its idle cost taken out.

One daemon serves the demo model; a streamed Chat Completions request of
``--max-tokens`` runs ``--streams`` times. For each stream: the daemon process's
CPU (its runner is a separate process and is not counted) minus what the same
daemon spends idle over the same wall time (measured for ``--idle-s`` before the
streams), divided by the tokens streamed. That is the serving path's own cost a
token: reading the runner's frame, the supervisor, the chat shaping, SSE, HTTP.
On a GPU a token of this model takes a couple of milliseconds, so this is what
caps one daemon's aggregate streaming rate.

With ``--baseline-tree DIR`` (a copy of the tree with the previous code, e.g. a
``git worktree``) a daemon from there is measured too, the trees alternating round
by round, so before/after comes from one run at one machine load.

Run from the repository root::

    .venv/bin/python -m bench.daemon_tokens [--rounds 2] [--streams 3] \
        [--max-tokens 900] [--baseline-tree /tmp/skulk-before] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

if __package__ in (None, ""):  # `python bench/daemon_tokens.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_PROMPT,
    REPO_ROOT,
    add_run_options,
    chat_body,
    machine,
    median,
    print_json,
    skulk_serving,
    stream_chat,
    wait_for_quiet,
)
from bench.fabric_tokens import _cpu_s


def measure_tree(
    tree: Path, models_dir: Path, streams: int, max_tokens: int, idle_s: float
) -> list[dict[str, float]]:
    """``streams`` streams through a fresh daemon run from ``tree``."""
    rows: list[dict[str, float]] = []
    with (
        skulk_serving(models_dir, 2048, tree=tree) as daemon,
        httpx.Client(timeout=600.0) as client,
    ):
        assert daemon.process is not None
        process = psutil.Process(daemon.process.pid)
        stream_chat(client, daemon.url, chat_body(DEFAULT_PROMPT, 16))  # warm
        cpu, wall = _cpu_s(process), time.monotonic()
        time.sleep(idle_s)
        idle = (_cpu_s(process) - cpu) / (time.monotonic() - wall)
        for _ in range(streams):
            cpu, wall = _cpu_s(process), time.monotonic()
            timing = stream_chat(client, daemon.url, chat_body(DEFAULT_PROMPT, max_tokens))
            spent = _cpu_s(process) - cpu - idle * (time.monotonic() - wall)
            rows.append(
                {
                    "tokens": timing.tokens,
                    "decode_tps": timing.decode_tps,
                    "idle_cpu_ms_per_s": idle * 1000,
                    "cpu_ms_per_token": spent * 1000 / max(timing.tokens, 1),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--streams", type=int, default=3, help="streams per tree per round")
    parser.add_argument("--max-tokens", type=int, default=900)
    parser.add_argument("--idle-s", type=float, default=6.0)
    parser.add_argument("--baseline-tree", type=Path, default=None)
    add_run_options(parser)
    args = parser.parse_args(argv)
    load_at_start = wait_for_quiet(args.max_load)
    trees = {"current": REPO_ROOT}
    if args.baseline_tree is not None:
        trees["baseline"] = args.baseline_tree
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            got = measure_tree(
                trees[name], args.models_dir, args.streams, args.max_tokens, args.idle_s
            )
            rows[name] += got
            for row in got:
                print(
                    f"round {round_ + 1}/{args.rounds} {name}: {row['tokens']:.0f} tokens, "
                    f"{row['decode_tps']:.1f} tok/s, {row['cpu_ms_per_token']:.3f} ms CPU/token "
                    f"(idle {row['idle_cpu_ms_per_s']:.1f} ms/s)",
                    file=sys.stderr,
                )
    result: dict[str, Any] = {
        name: {key: round(median([r[key] for r in got]), 3) for key in got[0]}
        | {"per_stream_cpu_ms_per_token": [round(r["cpu_ms_per_token"], 3) for r in got]}
        for name, got in rows.items()
    }
    for name, row in result.items():
        print(
            f"{name}: {row['cpu_ms_per_token']:.3f} ms of daemon CPU a streamed token "
            f"(median of {len(rows[name])}), idle {row['idle_cpu_ms_per_s']:.1f} ms/s, "
            f"{row['decode_tps']:.1f} tok/s"
        )
    if "baseline" in result:
        ratio = result["current"]["cpu_ms_per_token"] / result["baseline"]["cpu_ms_per_token"]
        print(f"current / baseline: {ratio:.3f}")
    if args.json:
        print_json(
            {
                "benchmark": "daemon_tokens",
                "result": result,
                "machine": machine(),
                "load_at_start": round(load_at_start, 2),
            }
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
