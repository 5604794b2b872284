"""Cache-aware routing across replicas: two nodes, one replica of the demo model on
each, conversations interleaved through both APIs.

Eight conversations (a ~230-token system prompt of their own, ~150-token user turns,
24-token replies, as in ``multi_turn``) take turns round-robin, and each turn goes
through the other node's API than the last. A turn "hits" when the engine reports
cached prompt tokens for it (``cached_tokens`` in the stream's usage). Figures: the
share of turns after the first that hit, and the median time to first token over
those turns, against the same conversations run one at a time on a single replica
(one node's API, the other replica deleted) in the same run.

Targets (issue #19): >= 90 % of turns after the first hit a cached prefix; TTFT
within 1.2x the single-replica figure.

Run from the repository root::

    .venv/bin/python -m bench.replicas [--turns 4] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any, Final

import httpx

if __package__ in (None, ""):  # `python bench/replicas.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import add_run_options, cpu_count, machine, median, print_json, wait_for_quiet
from bench.distributed import _node_id, delete, place, two_nodes
from bench.multi_turn import CONTEXT, SYSTEM_WORDS, USER_WORDS, Timed, body, stream, words

CONVERSATIONS: Final = 8
HIT_TARGET: Final = 0.9
TTFT_TARGET: Final = 1.2


def _cached(timing: Timed) -> int:
    stats = timing.stats or {}
    return int(stats.get("cached_tokens", 0))


async def interleaved(urls: list[str], turns: int, seed: str) -> list[list[Timed]]:
    """Every conversation's turns, round-robin, alternating APIs turn by turn."""
    histories = [
        [{"role": "system", "content": words(f"{seed}/c{c}/system", SYSTEM_WORDS)}]
        for c in range(CONVERSATIONS)
    ]
    timings: list[list[Timed]] = [[] for _ in range(CONVERSATIONS)]
    async with httpx.AsyncClient(timeout=600.0) as client:
        for turn in range(turns):
            for c, messages in enumerate(histories):
                messages.append(
                    {"role": "user", "content": words(f"{seed}/c{c}/u{turn}", USER_WORDS)}
                )
                url = urls[(c + turn) % len(urls)]
                timing = await stream(client, url, body(messages))
                messages.append({"role": "assistant", "content": "".join(timing.text)})
                timings[c].append(timing)
    return timings


def summary(timings: list[list[Timed]]) -> dict[str, Any]:
    later = [t for conversation in timings for t in conversation[1:]]
    hits = sum(_cached(t) > 0 for t in later)
    return {
        "turns_after_first": len(later),
        "hits": hits,
        "hit_rate": round(hits / len(later), 3) if later else None,
        "ttft_ms": round(median([t.ttft_s * 1000.0 for t in later]), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=4)
    add_run_options(parser)
    args = parser.parse_args(argv)
    load_at_start = wait_for_quiet(args.max_load)
    with two_nodes(args.models_dir) as (a, b):
        on_a = place(a, [b], context_tokens=CONTEXT, excluded_nodes=[_node_id(b)])
        on_b = place(a, [b], context_tokens=CONTEXT, excluded_nodes=[_node_id(a)])
        asyncio.run(interleaved([a.url], 1, "warm-up"))
        replicas = summary(asyncio.run(interleaved([a.url, b.url], args.turns, "replicas")))
        delete(a, on_b["instanceId"])
        single = summary(asyncio.run(interleaved([a.url], args.turns, "single")))
        delete(a, on_a["instanceId"])
    ratio = replicas["ttft_ms"] / single["ttft_ms"] if single["ttft_ms"] else None
    out = {
        "replicas": replicas,
        "single_replica": single,
        "ttft_replicas_over_single": round(ratio, 3) if ratio else None,
        "targets": {"hit_rate": HIT_TARGET, "ttft_ratio": TTFT_TARGET},
    }
    print(
        f"two replicas: {replicas['hits']}/{replicas['turns_after_first']} later turns hit "
        f"({replicas['hit_rate']:.0%}, target {HIT_TARGET:.0%}); TTFT {replicas['ttft_ms']:.0f} ms"
        f" vs {single['ttft_ms']:.0f} ms on one replica ({out['ttft_replicas_over_single']}x,"
        f" target <= {TTFT_TARGET}x)"
    )
    if args.json:
        print_json(
            {
                "benchmark": "replicas",
                **out,
                "conversations": CONVERSATIONS,
                "turns": args.turns,
                "threads": cpu_count(),
                "machine": machine(),
                "load_at_start": round(load_at_start, 2),
            }
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
