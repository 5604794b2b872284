"""``join``: fresh nodes join the cluster ``replication`` left behind, one after
another; peer: a lone daemon's start."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path
from typing import Any, Final

from bench._common import (
    median,
)
from bench.fabric._cluster import (
    CONVERGE_TIMEOUT_S,
    diag,
    log,
    log_size,
    new_daemon,
    node_ids,
    now,
    r,
    self_elected,
    topology,
    wait_converged,
)
from bench.fabric._http import HttpError, QuickHttp
from skulk_daemon.node.identity import load_identity
from tests.daemon_process import DaemonProcess, free_port

START_TIMEOUT_S: Final = 120.0


async def spawn_until_api(
    http: QuickHttp, daemon: DaemonProcess, poll_s: float
) -> tuple[float, float]:
    """Spawn; return (when it was spawned, seconds until ``/node_id`` answered)."""
    spawned = now()
    process = daemon.spawn()
    retries = 2
    while now() - spawned < START_TIMEOUT_S:
        if process.poll() is not None:
            if retries and "already in use" in daemon.log_text():
                retries -= 1  # a port picked free was taken meanwhile: new ports, again
                daemon.port, daemon.fabric_port = free_port(), free_port()
                daemon.log_path.unlink()
                spawned = now()
                process = daemon.spawn()
                continue
            raise RuntimeError(f"daemon exited with {process.returncode}:\n{daemon.log_text()}")
        with contextlib.suppress(HttpError):
            if (await http.get(f"{daemon.url}/node_id", limit_s=1.0)).status == 200:
                return spawned, now() - spawned
        await asyncio.sleep(poll_s)
    raise RuntimeError("the daemon's API never answered")


async def one_join(
    http: QuickHttp,
    cluster: list[DaemonProcess],
    master: DaemonProcess,
    joiner: DaemonProcess,
    poll_s: float,
) -> dict[str, Any]:
    history = int((await diag(http, master))["lastEventAppliedIdx"]) + 1
    # The joiner's key is made before it starts (the daemon loads it), so its id is
    # known and the cluster's topologies can be watched from the moment of spawning.
    joiner.data_dir.mkdir(parents=True, mode=0o700)
    joiner_id = str(
        load_identity(joiner.data_dir / "node_key.pem", joiner.data_dir / "node_install_id").node_id
    )
    spawning = now()

    async def known_to_cluster() -> float:
        while True:
            with contextlib.suppress(HttpError):
                views = await asyncio.gather(*(topology(http, d) for d in cluster))
                if all(joiner_id in v for v in views):
                    return now() - spawning
            await asyncio.sleep(poll_s)

    watcher = asyncio.create_task(known_to_cluster())
    spawned, api_s = await spawn_until_api(http, joiner, poll_s)
    if str((await http.get(f"{joiner.url}/node_id")).json()) != joiner_id:
        raise RuntimeError("the joiner did not use the key made for it")
    own_view: float | None = None
    converged: float | None = None
    deadline = now() + CONVERGE_TIMEOUT_S
    while now() < deadline and (own_view is None or converged is None):
        at = now() - spawned
        m, j = await asyncio.gather(diag(http, master), diag(http, joiner))
        if own_view is None and len(await topology(http, joiner)) == len(cluster) + 1:
            own_view = at
        if converged is None and j["lastEventAppliedIdx"] == m["lastEventAppliedIdx"] >= history:
            converged = at
        await asyncio.sleep(poll_s)
    in_cluster = await asyncio.wait_for(watcher, CONVERGE_TIMEOUT_S)
    if own_view is None or converged is None:
        raise RuntimeError("the joiner did not converge in time")
    return {
        "self_elected": self_elected(joiner),
        "history_events": history,
        "api_s": round(api_s, 3),
        "in_cluster_topology_s": round(in_cluster, 3),
        "in_every_topology_s": round(max(in_cluster, own_view), 3),
        "converged_s": round(converged, 3),
    }


async def join_section(
    args: argparse.Namespace, root: Path, cluster: list[DaemonProcess]
) -> dict[str, Any]:
    """Each joiner stays: the n-th joins a cluster of 4 + n - 1 (a killed one would
    stay a member for the 10 s membership timeout, and its removal would land in
    the next join)."""
    runs: list[dict[str, Any]] = []
    lone_starts: list[float] = []
    members = list(cluster)
    http = QuickHttp()
    try:
        for rep in range(args.join_reps):
            ids = await node_ids(http, members)
            master_id, _ = await wait_converged(http, members, len(members))
            master = members[ids.index(master_id)]
            via = next(d for d in members if d is not master)
            # The peer: a lone daemon, no peers, spawned the same way.
            lone = new_daemon(root / f"lone-start{rep}", args.models_dir)
            try:
                _, lone_s = await spawn_until_api(http, lone, args.join_poll_s)
            finally:
                lone.kill()
            lone_starts.append(lone_s)
            joiner = new_daemon(root / f"joiner{rep}", args.models_dir, [via.fabric_address])
            offset = log_size(master)
            try:
                run = await one_join(http, members, master, joiner, args.join_poll_s)
            except BaseException:
                joiner.kill()
                raise
            members.append(joiner)
            joiner_id = str((await http.get(f"{joiner.url}/node_id")).json())
            run["cluster_size"] = len(members) - 1
            run["lone_api_s"] = round(lone_s, 3)
            # Evidence for a join bug (see the README): the master removing the joiner
            # as "unseen" right after ordering its registration.
            run["removed_as_unseen"] = any(
                joiner_id in line and "unseen" in line
                for line in master.log_text()[offset:].splitlines()
            )
            log(f"join {rep + 1}/{args.join_reps}: {run}")
            runs.append(run)
    finally:
        http.close()
        for joiner in members[len(cluster) :]:
            joiner.kill()
    return {
        "reps": len(runs),
        "api_s_median": r(median([x["api_s"] for x in runs]), 3),
        "in_cluster_topology_s_median": r(median([x["in_cluster_topology_s"] for x in runs]), 3),
        "in_every_topology_s_median": r(median([x["in_every_topology_s"] for x in runs]), 3),
        "converged_s_median": r(median([x["converged_s"] for x in runs]), 3),
        "lone_api_s_median": r(median(lone_starts), 3),
        "runs": runs,
    }
