"""The cluster fabric on loopback: replication, data-plane latency, failover, join.

The command line, and the order the sections run in: ``join`` reuses the cluster
``replication`` leaves behind (its history is what a joiner catches up on).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

from bench._common import (
    add_run_options,
    machine,
    print_json,
    wait_for_quiet,
)
from bench.fabric._cluster import (
    cluster_of,
    new_daemon,
    now,
    start,
)
from bench.fabric._dataplane import dataplane_section
from bench.fabric._failover import failover_section
from bench.fabric._join import join_section
from bench.fabric._replication import replication_section
from bench.fabric._report import print_tables

SECTIONS: Final = ("replication", "dataplane", "failover", "join")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fabric",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--pairs", type=int, default=150, help="add/remove pairs per phase")
    parser.add_argument("--concurrency", type=int, default=8, help="client workers per phase")
    parser.add_argument("--poll-s", type=float, default=0.02, help="sampling round period")
    parser.add_argument("--probes", type=int, default=10, help="lone add/remove probe pairs")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 65536])
    parser.add_argument("--pings", type=int, default=2000, help="measured pings per side/size")
    parser.add_argument("--blocks", type=int, default=10, help="ABBA blocks the pings split into")
    parser.add_argument("--failover-reps", type=int, default=3)
    parser.add_argument(
        "--failover-removal",
        action="store_true",
        help="also time the dead master's removal from the topology (~10 s more per rep)",
    )
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--join-reps", type=int, default=3, help="joiners, one after another")
    parser.add_argument("--join-poll-s", type=float, default=0.05)
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="where the daemons' data dirs go (default: the system temp dir; its disk "
        "takes every node's fsync)",
    )
    add_run_options(parser)
    args = parser.parse_args(argv)
    load_at_start = wait_for_quiet(args.max_load)
    args.models_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"benchmark": "fabric"}
    timings: dict[str, float] = {}
    root = Path(tempfile.mkdtemp(prefix="skulk-bench-fabric-", dir=args.root))
    try:
        if "replication" in args.sections or "join" in args.sections:
            started = now()
            with cluster_of(root, args.models_dir, 4, "r") as cluster:
                if "replication" in args.sections:
                    lone = new_daemon(root / "lone", args.models_dir)
                    try:
                        start(lone)
                        result["replication"] = asyncio.run(
                            replication_section(args, cluster, lone)
                        )
                    finally:
                        lone.kill()
                    timings["replication"] = now() - started
                if "join" in args.sections:
                    started = now()
                    result["join"] = asyncio.run(join_section(args, root, cluster))
                    timings["join"] = now() - started
        if "dataplane" in args.sections:
            started = now()
            result["dataplane"] = asyncio.run(dataplane_section(args))
            timings["dataplane"] = now() - started
        if "failover" in args.sections:
            started = now()
            result["failover"] = asyncio.run(failover_section(args, root))
            timings["failover"] = now() - started
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result.update(
        section_seconds={k: round(v, 1) for k, v in timings.items()},
        machine=machine(),
        load_at_start=round(load_at_start, 2),
    )
    print_tables(result)
    print(f"\nsection wall time (s): {result['section_seconds']}")
    if args.json:
        print_json(result)
    return 0
