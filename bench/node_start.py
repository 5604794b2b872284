"""How soon a node answers after ``skulk serve``, and how long the CLI takes to answer.

Each run starts ``skulk serve`` (the installed console script, as a user types it) on
the same data, config and models dirs and times, from the spawn:

- ``node_id``: the first ``200`` from ``GET /node_id`` (identity: the API is served);
- ``state``: the first ``GET /state`` naming this node as master (it registered and won
  its own election: what a caller placing a model waits for);

then stops the node (``SIGTERM``) and waits ``--gap`` seconds. ``skulk --help`` and
``skulk status`` (against the running node) are timed as processes, start to exit.

"A warm machine" is what this measures: one untimed start first (it generates the
node's keys, installs the demo model, fills the page cache and writes Python's
bytecode). The children run with ``PYTHONDONTWRITEBYTECODE`` removed: a user's
interpreter keeps its bytecode, and without it every start compiles every module
again (on this 2-vCPU VM ``skulk --help`` took 0.43-0.52 s so, 0.10-0.13 s with it).
One side, no peer: each run records the load before it, and the script first waits
for a quiet machine (``--max-load``).

Targets (issue 43): ``/node_id`` ≤ 1.5 s; ``skulk --help`` and ``skulk status`` ≤ 0.3 s.

Run from the repository root::

    .venv/bin/python -m bench.node_start [--reps 5] [--json]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import httpx

if __package__ in (None, ""):  # `python bench/node_start.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import add_run_options, machine, median, print_json, wait_for_quiet
from bench._isolation import spread, spread_text
from tests.daemon_process import free_port

NODE_TARGET_S: Final = 1.5
CLI_TARGET_S: Final = 0.3
START_TIMEOUT_S: Final = 120.0
POLL_S: Final = 0.01
SKULK: Final = Path(sys.executable).parent / "skulk"
"""The console script ``uv sync`` installs next to the project's interpreter."""


def _environment() -> dict[str, str]:
    env = {**os.environ, "SKULK_MDNS": "0"}
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "SKULK_API_URL"):
        env.pop(name, None)
    return env


def _first(poll: Callable[[], bool], process: subprocess.Popen[bytes], what: str) -> float:
    """The ``perf_counter`` time at which ``poll()`` first holds, polled every
    :data:`POLL_S`; raises if the node exits first or :data:`START_TIMEOUT_S` passes."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"skulk serve exited with {process.returncode} before {what}")
        try:
            if poll():
                return time.perf_counter()
        except httpx.HTTPError:
            pass
        time.sleep(POLL_S)
    raise RuntimeError(f"no {what} within {START_TIMEOUT_S:g} s")


class Node:
    """``skulk serve`` on free ports over one set of dirs, started and stopped per run."""

    def __init__(self, root: Path, models_dir: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [
            str(SKULK),
            "serve",
            "--api-port",
            str(self.port),
            "--fabric-port",
            str(free_port()),
            "--data-dir",
            str(root / "data"),
            "--config-home",
            str(root / "config"),
            "--models-dir",
            str(models_dir),
        ]

    def start(self, client: httpx.Client) -> tuple[subprocess.Popen[bytes], dict[str, float]]:
        """Spawn the node; seconds from the spawn to each milestone."""
        with (self.root / "serve.log").open("ab") as log:
            started = time.perf_counter()
            process = subprocess.Popen(
                self.argv, env=_environment(), stdout=log, stderr=subprocess.STDOUT
            )
        node_id: list[str] = []

        def identity() -> bool:
            answer = client.get(f"{self.url}/node_id", timeout=1)
            if answer.status_code == 200:
                node_id.append(answer.json())
            return bool(node_id)

        def elected() -> bool:
            state = client.get(f"{self.url}/state", timeout=2).json()
            return bool(state.get("masterNodeId") == node_id[0])

        at_identity = _first(identity, process, "an answer to /node_id")
        at_state = _first(elected, process, "State naming the node master")
        return process, {"node_id": at_identity - started, "state": at_state - started}

    @staticmethod
    def stop(process: subprocess.Popen[bytes]) -> None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _cli_seconds(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [str(SKULK), *args], env=_environment(), capture_output=True, check=False, timeout=60
    )
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    add_run_options(parser)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--gap", type=float, default=2.0, help="seconds between runs")
    args = parser.parse_args(argv)
    if not SKULK.exists():
        raise SystemExit(f"{SKULK} is missing: run `uv sync` first")
    load = wait_for_quiet(args.max_load)
    times: dict[str, list[float]] = {"node_id": [], "state": [], "help": [], "status": []}
    loads: list[float] = []
    args.models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="skulk-start-") as root, httpx.Client() as client:
        node = Node(Path(root), args.models_dir)
        process, _ = node.start(client)  # the warm-up: keys, demo model, bytecode
        _cli_seconds("--help")
        _cli_seconds("--api-url", node.url, "status")
        node.stop(process)
        for _ in range(args.reps):
            time.sleep(args.gap)
            loads.append(os.getloadavg()[0])
            process, milestones = node.start(client)
            for name, seconds in milestones.items():
                times[name].append(seconds)
            times["help"].append(_cli_seconds("--help"))
            times["status"].append(_cli_seconds("--api-url", node.url, "status"))
            node.stop(process)
    targets: dict[str, float | None] = {
        "node_id": NODE_TARGET_S,
        "state": None,
        "help": CLI_TARGET_S,
        "status": CLI_TARGET_S,
    }
    print(f"{args.reps} runs, load before each {min(loads):.2f}-{max(loads):.2f}")
    for name, values in times.items():
        target = targets[name]
        verdict = (
            ""
            if target is None
            else f"  target ≤ {target} s: " + ("met" if median(values) <= target else "NOT met")
        )
        print(f"{name:>8}: {spread_text([v * 1000 for v in values])} ms{verdict}")
    if args.json:
        payload: dict[str, Any] = {
            "bench": "node_start",
            "machine": machine(),
            "load_at_start": load,
            "loads": loads,
            "seconds": times,
            "spread_ms": {k: spread([v * 1000 for v in vs]) for k, vs in times.items()},
        }
        print_json(payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
