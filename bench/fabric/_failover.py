"""``failover``: SIGKILL the master of three daemons and time the new master, a chat
to the instance's host and a State command; peer: the election's own window."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path
from typing import Any, Final

from bench._common import (
    DEMO_MODEL,
    median,
)
from bench.fabric._cluster import (
    card,
    cluster_of,
    diag,
    log,
    log_size,
    node_ids,
    now,
    r,
    self_elected,
    start,
    topology,
    wait_converged,
)
from bench.fabric._http import HttpError, QuickHttp
from skulk_core.cluster.election import DEFAULT_CAMPAIGN_SECONDS, DEFAULT_MASTER_TIMEOUT_SECONDS
from skulk_daemon.fabric.settings import FabricSettings
from tests.daemon_process import DaemonProcess

FAILOVER_TARGET_S: Final = 10.0
CHAT_PROMPT: Final = [{"role": "user", "content": "Count: one, two, three,"}]
READY_TIMEOUT_S: Final = 180.0


def chat_body(max_tokens: int = 1) -> dict[str, Any]:
    return {
        "model": DEMO_MODEL,
        "messages": CHAT_PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
    }


async def place_on(http: QuickHttp, host: DaemonProcess, others: list[str], context: int) -> str:
    placed = await http.request(
        "POST",
        f"{host.url}/place_instance",
        {
            "model_id": DEMO_MODEL,
            "min_nodes": 1,
            "context_tokens": context,
            "excluded_nodes": others,
        },
    )
    if placed.status != 200:
        raise RuntimeError(f"place_instance: {placed.status} {placed.body!r}")
    instance_id = str(placed.json()["instance_id"])
    deadline = now() + READY_TIMEOUT_S
    while now() < deadline:
        if await asyncio.to_thread(host.runner_status, instance_id) == "RunnerReady":
            return instance_id
        await asyncio.sleep(0.2)
    raise RuntimeError(f"the runner on {host.url} was not ready in time")


async def timed_chat(http: QuickHttp, host: DaemonProcess) -> tuple[float, int]:
    sent = now()
    answer = await http.request("POST", f"{host.url}/v1/chat/completions", chat_body())
    return now() - sent, answer.status


async def one_failover(
    http: QuickHttp,
    *,
    daemons: list[DaemonProcess],
    ids: list[str],
    master_id: str,
    host: DaemonProcess,
    poll_s: float,
) -> dict[str, Any]:
    dead = daemons[ids.index(master_id)]
    survivors = [d for d in daemons if d is not dead]
    killed = now()
    dead.kill()  # SIGKILL, then reap it
    new_master: dict[str, Any] = {}
    attempts: dict[str, list[dict[str, Any]]] = {"chat": [], "command": []}

    async def watch_master() -> None:
        while True:
            with contextlib.suppress(HttpError):
                views = await asyncio.gather(*(diag(http, d) for d in survivors))
                masters = {(v["cluster"] or {}).get("master") for v in views}
                if len(masters) == 1 and None not in masters and master_id not in masters:
                    new_master.update(at=now() - killed, id=masters.pop())
                    return
            await asyncio.sleep(poll_s)

    async def until_ok(kind: str, method: str, path: str, body: object) -> float:
        """Send until one answers 200; seconds from the kill to that answer."""
        log_ = attempts[kind]
        while True:
            sent = now()
            try:
                status: int | str = (await http.request(method, f"{host.url}{path}", body)).status
            except HttpError as exc:
                status = str(exc)
            took = now() - sent
            log_.append(
                {"sent_s": round(sent - killed, 3), "took_s": round(took, 3), "status": status}
            )
            if status == 200:
                return now() - killed
            await asyncio.sleep(0.1)

    command = {"model_card": card(f"bench/failover-{master_id[-8:]}-{killed:.0f}")}
    served, commanded, _ = await asyncio.wait_for(
        asyncio.gather(
            until_ok("chat", "POST", "/v1/chat/completions", chat_body()),
            until_ok("command", "POST", "/models/add-card", command),
            watch_master(),
        ),
        timeout=90.0,
    )
    return {
        "new_master_s": round(new_master["at"], 3),
        "chat_ok_s": round(served, 3),
        "command_ok_s": round(commanded, 3),
        "attempts": attempts,
        "killed": master_id,
        "new_master": new_master["id"],
        "ok": served < FAILOVER_TARGET_S,
        "_killed_at": killed,
    }


async def failover_section(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    baseline_chat: list[float] = []
    with cluster_of(root, args.models_dir, 3, "f") as daemons:
        http = QuickHttp()
        try:
            ids = await node_ids(http, daemons)
            instance: tuple[str, DaemonProcess] | None = None
            for rep in range(args.failover_reps):
                master_id, idx = await wait_converged(http, daemons, 3)
                if instance is None or ids[daemons.index(instance[1])] == master_id:
                    if instance is not None:  # its host became master: move it
                        await http.request("DELETE", f"{instance[1].url}/instance/{instance[0]}")
                    # The lowest id among followers: with equal history the highest id
                    # wins an election, so this host is the least likely next master.
                    host_id = min(i for i in ids if i != master_id)
                    host = daemons[ids.index(host_id)]
                    others = [i for i in ids if i != host_id]
                    instance = (await place_on(http, host, others, args.context), host)
                    log(f"failover: demo placed on {host_id}")
                host = instance[1]
                for _ in range(2):  # warm the path; the second one is the baseline
                    took, status = await timed_chat(http, host)
                    if status != 200:
                        raise RuntimeError(f"chat before the kill answered {status}")
                baseline_chat.append(took)
                run = await one_failover(
                    http,
                    daemons=daemons,
                    ids=ids,
                    master_id=master_id,
                    host=host,
                    poll_s=args.poll_s,
                )
                run["history_events"] = idx + 1
                log(
                    f"failover {rep + 1}/{args.failover_reps}: new master after "
                    f"{run['new_master_s']:.2f} s, chat ok after {run['chat_ok_s']:.2f} s, "
                    f"a State command ok after {run['command_ok_s']:.2f} s"
                )
                dead = daemons[ids.index(master_id)]
                killed_at = run.pop("_killed_at")
                if args.failover_removal:
                    survivors = [d for d in daemons if d is not dead]
                    while True:
                        views = await asyncio.gather(*(topology(http, d) for d in survivors))
                        if all(master_id not in v for v in views):
                            break
                        await asyncio.sleep(0.2)
                    run["removed_s"] = round(now() - killed_at, 3)
                runs.append(run)
                offset = log_size(dead)
                await asyncio.to_thread(start, dead)  # same identity, rejoins as follower
                await wait_converged(http, daemons, 3)
                run["restarted_self_elected"] = self_elected(dead, offset)
        finally:
            http.close()
    # The election's own window: followers give up on a master 1.25 s (plus up to
    # 0.5 s of jitter) after last hearing it (it beats every 0.5 s), then campaign
    # for 0.4 s. The jitter is left out of the window's upper end.
    beat = FabricSettings().beat_seconds
    window = (
        DEFAULT_MASTER_TIMEOUT_SECONDS - beat + DEFAULT_CAMPAIGN_SECONDS,
        DEFAULT_MASTER_TIMEOUT_SECONDS + DEFAULT_CAMPAIGN_SECONDS,
    )
    masters = [x["new_master_s"] for x in runs]
    served = [x["chat_ok_s"] for x in runs]
    commanded = [x["command_ok_s"] for x in runs]
    return {
        "reps": len(runs),
        "new_master_s_median": r(median(masters), 3),
        "new_master_s_max": r(max(masters), 3) if masters else None,
        "chat_ok_s_median": r(median(served), 3),
        "chat_ok_s_max": r(max(served), 3) if served else None,
        "command_ok_s_median": r(median(commanded), 3),
        "command_ok_s_max": r(max(commanded), 3) if commanded else None,
        "target_s": FAILOVER_TARGET_S,
        "ok": bool(served) and max(served) < FAILOVER_TARGET_S,
        "election_window_s": window,
        "baseline_chat_ms_median": r(median(baseline_chat) * 1000, 1),
        "runs": runs,
    }
