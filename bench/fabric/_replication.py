"""``replication``: card commands through the master, the followers or all four
nodes, every node's index sampled in rounds; peer: a lone daemon."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from bench._common import (
    median,
)
from bench.fabric._cluster import (
    add_card,
    diag,
    log,
    node_ids,
    now,
    pct,
    r,
    remove_card,
    self_elected,
    wait_converged,
)
from bench.fabric._http import QuickHttp
from tests.daemon_process import DaemonProcess

CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")


def cpu_seconds(daemon: DaemonProcess) -> float:
    """User + system CPU the daemon's process has used (``/proc/<pid>/stat``)."""
    assert daemon.process is not None
    fields = Path(f"/proc/{daemon.process.pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def control_frames(view: dict[str, Any]) -> int:
    return int(((view["cluster"] or {}).get("frames") or {}).get("received", {}).get("control", 0))


@dataclass
class Rounds:
    """Sampled ``lastEventAppliedIdx`` of every node, one row per polling round."""

    times: list[float] = field(default_factory=list)
    indices: list[list[int]] = field(default_factory=list)

    def reached(self, node: int, idx: int, after: float = -math.inf) -> float | None:
        for at, row in zip(self.times, self.indices, strict=True):
            if at >= after and row[node] >= idx:
                return at
        return None


async def sample(
    http: QuickHttp,
    daemons: list[DaemonProcess],
    rounds: Rounds,
    period_s: float,
    stop: asyncio.Event,
) -> None:
    while not stop.is_set():
        started = now()
        views = await asyncio.gather(*(diag(http, d) for d in daemons))
        rounds.times.append(started)
        rounds.indices.append([int(v["lastEventAppliedIdx"]) for v in views])
        await asyncio.sleep(max(0.0, period_s - (now() - started)))


async def drive(
    http: QuickHttp, urls: list[str], pairs: int, concurrency: int, prefix: str
) -> list[float]:
    """``pairs`` add/remove pairs over ``concurrency`` workers, worker w on
    ``urls[w % len(urls)]``; returns each command's latency in seconds."""
    latencies: list[float] = []
    todo = iter(range(pairs))

    async def worker(w: int) -> None:
        url = urls[w % len(urls)]
        for i in todo:
            model_id = f"bench/{prefix}-{i}"
            for op in (add_card, remove_card):
                sent = now()
                await op(http, url, model_id)
                latencies.append(now() - sent)

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return latencies


async def load_phase(
    http: QuickHttp,
    daemons: list[DaemonProcess],
    via: list[DaemonProcess],
    *,
    label: str,
    pairs: int,
    concurrency: int,
    period_s: float,
) -> dict[str, Any]:
    """Drive load through ``via``; ``daemons[0]`` is the master (or the lone node)."""
    before = await asyncio.gather(*(diag(http, d) for d in daemons))
    start_idx = int(before[0]["lastEventAppliedIdx"])
    cpu_before = [cpu_seconds(d) for d in daemons]
    client_cpu = time.process_time()
    rounds = Rounds()
    stop = asyncio.Event()
    poller = asyncio.create_task(sample(http, daemons, rounds, period_s, stop))
    started = now()
    latencies = await drive(http, [d.url for d in via], pairs, concurrency, label)
    driven = now() - started
    final = int((await diag(http, daemons[0]))["lastEventAppliedIdx"])
    deadline = now() + 30.0
    while now() < deadline:
        if rounds.indices and min(rounds.indices[-1]) >= final:
            break
        await asyncio.sleep(period_s)
    stop.set()
    await poller
    cpu = [cpu_seconds(d) - b for d, b in zip(daemons, cpu_before, strict=True)]
    client_cpu = time.process_time() - client_cpu
    after = await asyncio.gather(*(diag(http, d) for d in daemons))
    events = final - start_idx
    reach = [rounds.reached(n, final, started) for n in range(len(daemons))]
    rates = [events / (t - started) if t is not None else float("nan") for t in reach]
    # Lag: for every round after the start, the master's index then, and the first
    # round at which every follower had it.
    lags: list[float] = []
    if len(daemons) > 1:
        for at, row in zip(rounds.times, rounds.indices, strict=True):
            if at < started or row[0] <= start_idx:
                continue
            later = [rounds.reached(n, row[0], at) for n in range(1, len(daemons))]
            if all(t is not None for t in later):
                lags.append(max(t for t in later if t is not None) - at)
    # Backlog: in each round while the load ran, how many events the slowest
    # follower was behind the master. Not quantized by the round period, unlike
    # the lag; divided by the master's rate it reads as a time.
    backlog = [
        float(max(0, row[0] - min(row[1:])))
        for at, row in zip(rounds.times, rounds.indices, strict=True)
        if len(row) > 1 and started <= at <= started + driven
    ]
    spans = [b - a for a, b in zip(rounds.times, rounds.times[1:], strict=False)]
    result = {
        "label": label,
        "via": len(via),
        "commands": 2 * pairs,
        "events": events,
        "concurrency": concurrency,
        "client_s": round(driven, 3),
        "client_cmd_per_s": round(2 * pairs / driven, 1),
        "command_ms_p50": r(pct(latencies, 50) * 1000),
        "command_ms_p99": r(pct(latencies, 99) * 1000),
        "master_events_per_s": r(rates[0], 1),
        "follower_events_per_s": [r(x, 1) for x in rates[1:]],
        "lag_ms_p50": r(pct(lags, 50) * 1000, 1),
        "lag_ms_p99": r(pct(lags, 99) * 1000, 1),
        "lag_samples": len(lags),
        "backlog_events_p50": r(pct(backlog, 50), 1),
        "backlog_events_p99": r(pct(backlog, 99), 1),
        "backlog_ms_p50": r(pct(backlog, 50) / rates[0] * 1000, 1),
        "backlog_ms_p99": r(pct(backlog, 99) / rates[0] * 1000, 1),
        "round_ms": r(median(spans) * 1000, 1),
        # CPU per event, polling included (each daemon answers one diagnostics GET
        # per round); the client's covers load, polling and this process's threads.
        "master_cpu_ms_per_event": r(cpu[0] / events * 1000),
        "follower_cpu_ms_per_event": [r(c / events * 1000) for c in cpu[1:]],
        "client_cpu_ms_per_event": r(client_cpu / events * 1000),
        "cpu_busy_cores": r((sum(cpu) + client_cpu) / (now() - started)),
        "follower_control_frames_per_event": [
            r((control_frames(a) - control_frames(b)) / events, 3)
            for a, b in zip(after[1:], before[1:], strict=True)
        ],
    }
    log(f"  {label}: {result}")
    return result


async def lone_event_probes(
    http: QuickHttp, daemons: list[DaemonProcess], probes: int
) -> dict[str, Any]:
    """One command at a time to the master on a quiet cluster: its answer time, and
    the time from its answer until every follower applied the event (followers
    polled together, back to back)."""
    master, followers = daemons[0], daemons[1:]
    commit: list[float] = []
    lag: list[float] = []
    for i in range(probes):
        model_id = f"bench/probe-{i}"
        for op in (add_card, remove_card):
            target = int((await diag(http, master))["lastEventAppliedIdx"]) + 1
            sent = now()
            await op(http, master.url, model_id)
            answered = now()
            while True:
                views = await asyncio.gather(*(diag(http, f) for f in followers))
                if all(v["lastEventAppliedIdx"] >= target for v in views):
                    break
            done = now()
            commit.append(answered - sent)
            lag.append(done - answered)
    return {
        "probes": len(commit),
        "master_answer_ms_p50": r(pct(commit, 50) * 1000),
        "master_answer_ms_p99": r(pct(commit, 99) * 1000),
        "followers_after_answer_ms_p50": r(pct(lag, 50) * 1000),
        "followers_after_answer_ms_p99": r(pct(lag, 99) * 1000),
    }


async def http_round_trips(daemon: DaemonProcess, count: int = 20) -> dict[str, Any]:
    """``GET /v1/diagnostics/node`` one at a time: httpx on a kept-alive connection,
    httpx on a fresh connection per request, and :class:`QuickHttp` (used here)."""
    url = f"{daemon.url}/v1/diagnostics/node"
    out: dict[str, Any] = {}

    async def timed(get: Callable[[], Awaitable[object]]) -> float:
        await get()
        times = []
        for _ in range(count):
            sent = now()
            await get()
            times.append(now() - sent)
        return r(pct(times, 50) * 1000) or float("nan")

    for label, limits in (
        ("httpx_keepalive", httpx.Limits()),
        ("httpx_fresh", httpx.Limits(max_keepalive_connections=0)),
    ):
        async with httpx.AsyncClient(timeout=30.0, limits=limits) as client:
            out[f"{label}_ms_p50"] = await timed(lambda: client.get(url))
    quick = QuickHttp()
    try:
        out["quick_ms_p50"] = await timed(lambda: quick.get(url))
    finally:
        quick.close()
    return out


async def replication_section(
    args: argparse.Namespace, cluster: list[DaemonProcess], lone: DaemonProcess
) -> dict[str, Any]:
    # A joiner that hears no master within its discovery grace briefly makes itself
    # master (see the README): count how many of the three did at start-up.
    flipped = sum(self_elected(d) for d in cluster[1:])
    round_trips = await http_round_trips(lone)
    log(f"replication: one API GET, p50: {round_trips}")
    http = QuickHttp()
    try:
        ids = await node_ids(http, cluster)
        master_id, idx = await wait_converged(http, cluster, len(cluster))
        master = cluster[ids.index(master_id)]
        ordered = [master] + [d for d in cluster if d is not master]
        followers = ordered[1:]
        log(f"replication: {len(cluster)} nodes converged at index {idx}, master {master_id}")
        common = {"pairs": args.pairs, "concurrency": args.concurrency, "period_s": args.poll_s}
        phases = [await load_phase(http, [lone], [lone], label="lone-a", **common)]
        for label, via in (("master", [master]), ("followers", followers), ("all", ordered)):
            phases.append(await load_phase(http, ordered, via, label=label, **common))
        phases.append(await load_phase(http, [lone], [lone], label="lone-b", **common))
        probes = await lone_event_probes(http, ordered, args.probes)
        log(f"  probes: {probes}")
    finally:
        http.close()
    lone_rate = median([p["master_events_per_s"] for p in phases if p["label"].startswith("lone")])
    for phase in phases:
        phase["vs_lone"] = r(phase["master_events_per_s"] / lone_rate, 3)
    return {
        "nodes": len(cluster),
        "phases": phases,
        "probes": probes,
        "lone_events_per_s": lone_rate,
        "http_get": round_trips,
        "joiners_self_elected_at_start": flipped,
    }
