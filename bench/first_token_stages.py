"""Where a streamed request's first token waits, stage by stage, on one daemon.

For each request (a fresh prompt each time, so nothing is cached; ``max_tokens`` 2):

- ``comment_ms``: request sent → the ``: command_id`` comment (body read and decoded,
  the turn admitted, the prompt rendered, the instance chosen: the API's own work);
- ``first_token_ms``: request sent → the first content frame;
- ``engine_ms``: the engine's own time to first token (``generation_stats``: from
  the task reaching the engine's scheduler to the first sampled token, prefill included);
- ``outside_engine_ms``: ``first_token_ms`` minus ``engine_ms``, what the daemon, the runner
  hop and HTTP add;
- ``api_cpu_ms``: the daemon process's CPU for the request up to its end, its idle rate
  taken out (the runner is a separate process and is not counted). Unlike the wall
  times this barely moves with machine load.

    .venv/bin/python -m bench.first_token_stages [--requests 12] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
import psutil

if __package__ in (None, ""):  # `python bench/first_token_stages.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import add_run_options, chat_body, print_json, skulk_serving, wait_for_quiet
from bench.fabric_tokens import _cpu_s

PROMPTS = (
    "The history of the river begins",
    "A short note on winter gardens:",
    "Instructions for the old radio were",
    "In the market square that morning",
)


def one_request(client: httpx.Client, url: str, prompt: str) -> dict[str, float]:
    now = time.perf_counter
    sent = now()
    comment = first = 0.0
    engine = float("nan")
    with client.stream("POST", f"{url}/v1/chat/completions", json=chat_body(prompt, 2)) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if line.startswith(": command_id") and not comment:
                comment = now()
            elif line.startswith('data: {"id"') and '"content"' in line and not first:
                first = now()
            elif line.startswith(": generation_stats "):
                stats = json.loads(line[len(": generation_stats ") :])
                engine = float(stats["time_to_first_token_ms"])
    return {
        "comment_ms": (comment - sent) * 1000,
        "first_token_ms": (first - sent) * 1000,
        "engine_ms": engine,
        "outside_engine_ms": (first - sent) * 1000 - engine,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--idle-s", type=float, default=4.0)
    add_run_options(parser)
    args = parser.parse_args(argv)
    load = wait_for_quiet(args.max_load)
    rows: list[dict[str, float]] = []
    with (
        skulk_serving(args.models_dir, 2048) as daemon,
        httpx.Client(timeout=600.0) as client,
    ):
        assert daemon.process is not None
        process = psutil.Process(daemon.process.pid)
        one_request(client, daemon.url, "Warm-up:")
        cpu, wall = _cpu_s(process), time.monotonic()
        time.sleep(args.idle_s)
        idle = (_cpu_s(process) - cpu) / (time.monotonic() - wall)
        for n in range(args.requests):
            prompt = f"{PROMPTS[n % len(PROMPTS)]} ({n})"
            cpu, wall = _cpu_s(process), time.monotonic()
            row = one_request(client, daemon.url, prompt)
            row["api_cpu_ms"] = (_cpu_s(process) - cpu - idle * (time.monotonic() - wall)) * 1000
            rows.append(row)
            print(", ".join(f"{k} {v:.1f}" for k, v in row.items()), file=sys.stderr)
    summary = {
        key: {
            "median": round(statistics.median(r[key] for r in rows), 2),
            "min": round(min(r[key] for r in rows), 2),
            "max": round(max(r[key] for r in rows), 2),
        }
        for key in rows[0]
    }
    for key, value in summary.items():
        print(f"{key}: median {value['median']} ms ({value['min']}-{value['max']})")
    print(f"load at start {load:.2f}, now {psutil.getloadavg()[0]:.2f}")
    if args.json:
        print_json({"benchmark": "first_token_stages", "summary": summary, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
