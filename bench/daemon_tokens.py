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

``--paced STEPS`` replaces the runner's engine with one that decodes nothing and
emits a token for every active stream ``STEPS`` times a second
(``bench/paced_runner``): the daemon reads the same frames, but no model competes
for the cores, and at a GPU's pace the daemon's idle work is a small part of what
is subtracted (at the demo model's CPU pace on a busy machine it is most of it).
``--concurrent`` runs the round's streams at once (a figure for all of them
together), as a GPU serving several clients would.

Run from the repository root::

    .venv/bin/python -m bench.daemon_tokens [--rounds 2] [--streams 3] \
        [--max-tokens 900] [--paced 200] [--concurrent] \
        [--baseline-tree /tmp/skulk-before] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any, Final

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
    stream_chat_async,
    wait_for_quiet,
)
from bench.fabric_tokens import _cpu_s

PACED_RUNNER: Final = Path(__file__).resolve().parent / "paced_runner"


def tree_env(tree: Path, paced: float | None) -> dict[str, str]:
    """The daemon's environment: ``tree``'s packages first for it and its runners
    (which start with ``-P``, so only ``PYTHONPATH`` decides; what it held before
    follows, e.g. optional packages), and the paced engine."""
    path = [str(tree), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    if paced is None:
        return {"PYTHONPATH": os.pathsep.join(path)}
    return {
        "PYTHONPATH": os.pathsep.join([str(PACED_RUNNER), *path]),
        "SKULK_BENCH_PACED_STEPS_S": str(paced),
    }


async def _concurrent(url: str, streams: int, max_tokens: int) -> list[Any]:
    async with httpx.AsyncClient(timeout=600.0) as client:
        return await asyncio.gather(
            *(
                stream_chat_async(client, url, chat_body(f"{DEFAULT_PROMPT} ({n})", max_tokens))
                for n in range(streams)
            )
        )


def measure_tree(
    tree: Path,
    models_dir: Path,
    streams: int,
    max_tokens: int,
    idle_s: float,
    *,
    paced: float | None = None,
    concurrent: bool = False,
) -> list[dict[str, float]]:
    """``streams`` streams through a fresh daemon run from ``tree`` (one row each, or
    one row for all of them at once when ``concurrent``)."""
    rows: list[dict[str, float]] = []
    with (
        skulk_serving(models_dir, 2048, tree=tree, env=tree_env(tree, paced)) as daemon,
        httpx.Client(timeout=600.0) as client,
    ):
        assert daemon.process is not None
        process = psutil.Process(daemon.process.pid)
        stream_chat(client, daemon.url, chat_body(DEFAULT_PROMPT, 16))  # warm
        cpu, wall = _cpu_s(process), time.monotonic()
        time.sleep(idle_s)
        idle = (_cpu_s(process) - cpu) / (time.monotonic() - wall)
        if concurrent:
            cpu, wall = _cpu_s(process), time.monotonic()
            timings = asyncio.run(_concurrent(daemon.url, streams, max_tokens))
            spent = _cpu_s(process) - cpu - idle * (time.monotonic() - wall)
            tokens = sum(timing.tokens for timing in timings)
            return [
                {
                    "tokens": tokens,
                    "decode_tps": tokens / (time.monotonic() - wall),
                    "idle_cpu_ms_per_s": idle * 1000,
                    "cpu_ms_per_token": spent * 1000 / max(tokens, 1),
                }
            ]
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
    parser.add_argument(
        "--paced", type=float, default=None, metavar="STEPS", help="paced engine, steps/s"
    )
    parser.add_argument("--concurrent", action="store_true", help="a round's streams at once")
    add_run_options(parser)
    args = parser.parse_args(argv)
    load_at_start = wait_for_quiet(args.max_load)
    trees = {"current": REPO_ROOT}
    if args.baseline_tree is not None:
        trees["baseline"] = args.baseline_tree.resolve()
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            got = measure_tree(
                trees[name],
                args.models_dir,
                args.streams,
                args.max_tokens,
                args.idle_s,
                paced=args.paced,
                concurrent=args.concurrent,
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
