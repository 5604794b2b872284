"""What tracing costs on decode: one daemon, tracing off and on, alternately.

The same streamed greedy generation (``--max-tokens`` tokens of the demo model) is
run with tracing off and on in an ABBA order, ``--reps`` pairs after ``--warmup``
discarded ones; the decode rates' medians are compared (tracing off is the peer).
Every run starts ``--gap`` seconds after the previous one, once the daemon and its
runner are idle (``bench/_isolation.py``), so no mode's trailing work (a trace
written, a task's bookkeeping) lands on the next. Tracing off must cost nothing
measurable (its check is one boolean per generation, so "off" is also compared
against itself: the noise floor of the machine), tracing on at most 3 %.

Targets: on/off decode ratio >= 0.97; off/off (the noise floor) >= 0.99.

Run from the repository root::

    .venv/bin/python -m bench.tracing [--reps 7] [--json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

import httpx

if __package__ in (None, ""):  # `python bench/tracing.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    DEFAULT_PROMPT,
    add_run_options,
    chat_body,
    machine,
    median,
    print_json,
    skulk_serving,
    stream_chat,
    wait_for_quiet,
)
from bench._isolation import Isolation, daemon_side, spread, spread_text

ON_TARGET: Final = 0.97
OFF_TARGET: Final = 0.99


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    add_run_options(parser)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between runs")
    args = parser.parse_args(argv)
    load = wait_for_quiet(args.max_load)
    rates: dict[str, list[float]] = {"off": [], "off2": [], "on": []}
    with skulk_serving(args.models_dir, 2048) as daemon, httpx.Client(timeout=300) as client:
        body = chat_body(DEFAULT_PROMPT, args.max_tokens)
        # One side: the modes share the daemon, so the check is that each run starts idle.
        isolation = Isolation([daemon_side("skulk", daemon.process)], gap_s=args.gap)

        def run(mode: str) -> float:
            enabled = mode == "on"
            client.put(f"{daemon.url}/v1/tracing", json={"enabled": enabled}).raise_for_status()
            return isolation.run("skulk", lambda: stream_chat(client, daemon.url, body).decode_tps)

        for rep in range(args.warmup + args.reps):
            order = ("off", "on", "off2") if rep % 2 == 0 else ("off2", "on", "off")
            measured = {mode: run(mode) for mode in order}
            if rep >= args.warmup:
                for mode, rate in measured.items():
                    rates[mode].append(rate)
        traced = len(client.get(f"{daemon.url}/v1/traces").json()["traces"])
    off, off2, on = (median(rates[m]) for m in ("off", "off2", "on"))
    result: dict[str, Any] = {
        "benchmark": "tracing",
        "machine": machine(),
        "load_at_start": round(load, 2),
        "decode_tps_off": round(off, 2),
        "decode_tps_off_again": round(off2, 2),
        "decode_tps_on": round(on, 2),
        "on_over_off": round(on / off, 4),
        "on_target": ON_TARGET,
        "on_ok": on / off >= ON_TARGET,
        "off_noise_floor": round(min(off, off2) / max(off, off2), 4),
        "off_target": OFF_TARGET,
        "traces_recorded": traced,
        "all": {mode: [round(r, 2) for r in values] for mode, values in rates.items()},
        "spread": {mode: spread(values) for mode, values in rates.items()},
        "isolation": isolation.report(),
    }
    print(
        f"decode tok/s: off {off:.2f}, off again {off2:.2f}, on {on:.2f}; "
        f"on/off {on / off:.3f}x (target >= {ON_TARGET}), off/off "
        f"{result['off_noise_floor']:.3f} (noise floor); {traced} traces recorded"
    )
    for mode, values in rates.items():
        print(f"  {mode}: {spread_text(values)} tok/s (median, p90, min-max)")
    if args.json:
        print_json(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
