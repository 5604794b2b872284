"""The harness: clusters of real daemons on loopback, what every section asks their
APIs, and the figures' small helpers."""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from bench.fabric._http import HttpError, QuickHttp
from tests.daemon_process import DaemonProcess, free_port

CLUSTER_KEY: Final = "skulk-bench-fabric-cluster-key-0001"
BENCH_ENV: Final = {"SKULK_MDNS": "0", "SKULK_CLUSTER_KEY": CLUSTER_KEY}
CONVERGE_TIMEOUT_S: Final = 60.0
now = time.perf_counter


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank); NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def r(value: float, digits: int = 2) -> float | None:
    return None if math.isnan(value) else round(value, digits)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- daemons -----------------------------------------------------------------------


def new_daemon(root: Path, models_dir: Path, peers: list[str] | None = None) -> DaemonProcess:
    return DaemonProcess(
        root=root, models_dir=models_dir, peers=list(peers or []), extra_env=dict(BENCH_ENV)
    )


def start(daemon: DaemonProcess, attempts: int = 3) -> DaemonProcess:
    """``daemon.start()``, on fresh ports when a chosen port was taken meanwhile (the
    ports are picked free, then released, then bound by the daemon: a race)."""
    for attempt in range(attempts):
        try:
            return daemon.start()
        except AssertionError as exc:
            if "already in use" not in str(exc) or attempt + 1 == attempts:
                raise
            daemon.port, daemon.fabric_port = free_port(), free_port()
    raise AssertionError("unreachable")


def start_all(daemons: list[DaemonProcess]) -> None:
    """Start daemons in parallel (``start`` blocks until ``/node_id`` answers, which a
    joining node does only once it follows a master)."""
    with ThreadPoolExecutor(max_workers=len(daemons)) as pool:
        for future in [pool.submit(start, d) for d in daemons]:
            future.result()


@contextlib.contextmanager
def cluster_of(root: Path, models_dir: Path, size: int, name: str) -> Iterator[list[DaemonProcess]]:
    """``size`` daemons; the first starts alone, the others name it as their peer."""
    daemons = [new_daemon(root / f"{name}0", models_dir)]
    try:
        start(daemons[0])
        peer = daemons[0].fabric_address
        daemons += [new_daemon(root / f"{name}{i}", models_dir, [peer]) for i in range(1, size)]
        start_all(daemons[1:])
        yield daemons
    finally:
        for daemon in daemons:
            daemon.kill()


SELF_ELECTED: Final = "this node is the master"


def self_elected(daemon: DaemonProcess, since: int = 0) -> bool:
    """Whether the daemon's log (from byte ``since``) shows it taking mastership."""
    return SELF_ELECTED in daemon.log_text()[since:]


def log_size(daemon: DaemonProcess) -> int:
    return len(daemon.log_text())


async def diag(http: QuickHttp, daemon: DaemonProcess) -> dict[str, Any]:
    answer = await http.get(f"{daemon.url}/v1/diagnostics/node")
    if answer.status != 200:
        raise HttpError(f"diagnostics answered {answer.status}")
    body: dict[str, Any] = answer.json()
    return body


async def node_ids(http: QuickHttp, daemons: list[DaemonProcess]) -> list[str]:
    return [str((await http.get(f"{d.url}/node_id")).json()) for d in daemons]


async def topology(http: QuickHttp, daemon: DaemonProcess) -> set[str]:
    state = (await http.get(f"{daemon.url}/state")).json()
    return set(state["topology"]["nodes"])


async def wait_converged(
    http: QuickHttp, daemons: list[DaemonProcess], members: int
) -> tuple[str, int]:
    """Every node agrees on the master and the index, and the topology has ``members``."""
    deadline = now() + CONVERGE_TIMEOUT_S
    seen: object = None
    while now() < deadline:
        with contextlib.suppress(HttpError):
            views = await asyncio.gather(*(diag(http, d) for d in daemons))
            masters = {(v["cluster"] or {}).get("master") for v in views}
            indices = {v["lastEventAppliedIdx"] for v in views}
            nodes = await asyncio.gather(*(topology(http, d) for d in daemons))
            seen = (masters, indices, [len(n) for n in nodes])
            agreed = len(masters) == 1 and None not in masters and len(indices) == 1
            if agreed and all(len(n) == members for n in nodes):
                return str(masters.pop()), int(indices.pop())
        await asyncio.sleep(0.1)
    raise RuntimeError(
        f"{len(daemons)} nodes did not converge on {members} members in time; last seen "
        f"(masters, indices, topology sizes): {seen}"
    )


def card(model_id: str) -> dict[str, Any]:
    return {
        "modelId": model_id,
        "sourceRepository": model_id,
        "sourceRevision": "0" * 40,
        "storageSize": {"inBytes": 1000},
        "nLayers": 2,
        "hiddenSize": 8,
        "supportsTensor": False,
        "tasks": ["TextGeneration"],
        "ggufFile": "model-Q4_K_M.gguf",
    }


async def add_card(http: QuickHttp, url: str, model_id: str) -> None:
    answer = await http.request("POST", f"{url}/models/add-card", {"model_card": card(model_id)})
    if answer.status != 200:
        raise RuntimeError(f"add-card via {url}: {answer.status} {answer.body!r}")


async def remove_card(http: QuickHttp, url: str, model_id: str) -> None:
    answer = await http.request("DELETE", f"{url}/models/custom/{model_id}")
    if answer.status != 200:
        raise RuntimeError(f"delete card via {url}: {answer.status} {answer.body!r}")
