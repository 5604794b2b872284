"""Multi-turn turn 8 across process starts: how much each side's speed moves from
one start of its process to the next.

``multi_turn.py`` starts Skulk's daemon and ``llama-server`` once per run, so a run
compares one start of each. Here each side is started ``--starts`` times, one side
at a time (the other's process does not exist meanwhile), and each start serves a
warm-up conversation and then ``--conversations`` 8-turn conversations exactly as
``multi_turn.py``'s (same settings, prompts nobody sent before, greedy, no pause).
Figures: each start's median turn-8 time to first token, their spread per side, and
the ratio of the medians over starts.

Run from the repository root::

    bench/build_llama_server.sh     # once
    .venv/bin/python -m bench.multi_turn_starts [--starts 4] [--conversations 3] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

if __package__ in (None, ""):  # `python bench/multi_turn_starts.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    add_run_options,
    demo_model_path,
    machine,
    median,
    print_json,
    skulk_serving,
    wait_for_quiet,
)
from bench._isolation import spread, spread_text
from bench.concurrency import DEFAULT_LLAMA_SERVER
from bench.multi_turn import CONTEXT, TURNS, ServerPeer, Side, run_side

GAP_S: Final = 3.0


def turn8_ms(side: Side) -> list[float]:
    return [conversation[TURNS - 1].ttft_s * 1000 for conversation in side.turns]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_options(parser)
    parser.add_argument("--starts", type=int, default=4)
    parser.add_argument("--conversations", type=int, default=3)
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    args = parser.parse_args()
    load = wait_for_quiet(args.max_load)
    model = demo_model_path(args.models_dir)
    per_start: dict[str, list[float]] = {"skulk": [], "server": []}
    runs: dict[str, list[list[float]]] = {"skulk": [], "server": []}
    for start in range(args.starts):
        seed = f"{time.time()}/{start}"
        with ExitStack() as stack:
            peer = ServerPeer(args.llama_server, model, stack, 0.0, 0.0)
            side = Side([], [])
            for conversation in range(args.conversations):
                peer.run(f"server/{seed}/{conversation}", side)
            runs["server"].append(turn8_ms(side))
        time.sleep(GAP_S)
        with skulk_serving(args.models_dir, CONTEXT) as daemon:
            run_side(daemon.url, f"warm-up/{seed}", Side([], []), 0.0)
            side = Side([], [])
            for conversation in range(args.conversations):
                run_side(daemon.url, f"skulk/{seed}/{conversation}", side, 0.0)
            runs["skulk"].append(turn8_ms(side))
        time.sleep(GAP_S)
        for name, medians in per_start.items():
            medians.append(median(runs[name][-1]))
            shown = ", ".join(f"{ms:.0f}" for ms in runs[name][-1])
            print(f"start {start + 1}: {name} turn 8 ms [{shown}]", file=sys.stderr)
    ratio = median(per_start["skulk"]) / median(per_start["server"])
    print(f"load {load:.2f} at start; turn-8 TTFT, each start's median, over the starts:")
    for name, values in per_start.items():
        print(f"  {name:>6}: {spread_text(values)} ms")
    print(f"Skulk / llama-server, medians over starts: {ratio:.3f} (target <= 1.0)")
    if args.json:
        out: dict[str, Any] = {
            "benchmark": "multi_turn_starts",
            "machine": machine(),
            "load_at_start": load,
            "starts": args.starts,
            "conversations": args.conversations,
            "turn8_ms_by_start": runs,
            "spread_ms": {name: spread(values) for name, values in per_start.items()},
            "ratio": round(ratio, 3),
        }
        print_json(out)


if __name__ == "__main__":
    main()
