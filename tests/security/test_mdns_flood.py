"""A LAN that announces hundreds of fake Skulk services cannot exhaust a real daemon.

Each announcement used to dial a fresh DEALER that was never closed. Here a stranger
on this machine's multicast registers far more fake services than the node will dial;
the daemon's open file descriptors stay bounded, the surplus is counted, and the node
keeps answering. Skipped, with the reason, where loopback multicast is unusable.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import uuid
from pathlib import Path

import pytest
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from skulk_daemon.fabric.discovery import SERVICE_TYPE
from skulk_daemon.fabric.peers import MAX_PENDING_DIALS
from tests.daemon.fabric_probe import LOOPBACK, loopback_mdns_problem
from tests.daemon.serving import wait_for
from tests.daemon_process import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("network")]

FAKES = 6 * MAX_PENDING_DIALS
# File descriptors a dial may hold (a socket and ZeroMQ's own pipes), with slack for
# what the node opens meanwhile anyway (runner pipes, HTTP clients).
FDS_PER_DIAL = 2
SLACK_FDS = 32


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def members(node: DaemonProcess) -> int:
    return len(node.get("/state").json()["topology"]["nodes"])


def _fake(index: int) -> AsyncServiceInfo:
    label = f"skulk-flood{index:04d}{uuid.uuid4().hex[:6]}"
    port = 20000 + index  # nothing listens there
    return AsyncServiceInfo(
        SERVICE_TYPE,
        f"{label}.{SERVICE_TYPE}",
        port=port,
        properties={"node_id": f"12D3KooW{uuid.uuid4().hex}", "port": str(port)},
        server=f"{label}.local.",
        parsed_addresses=[LOOPBACK],
    )


async def _flood(count: int) -> AsyncZeroconf:
    stranger = AsyncZeroconf(interfaces=[LOOPBACK])
    pending = [
        await stranger.async_register_service(_fake(i), cooperating_responders=True)
        for i in range(count)
    ]
    await asyncio.gather(*pending)
    return stranger


def test_a_flood_of_fake_services_leaves_the_node_bounded(
    tmp_path: Path, shared_models_dir: Path
) -> None:
    problem = loopback_mdns_problem()
    if problem is not None:
        pytest.skip(f"loopback multicast unusable here: {problem}")
    env = {"SKULK_MDNS": "1", "SKULK_CLUSTER_KEY": f"flood-{secrets.token_hex(16)}"}
    node = DaemonProcess(root=tmp_path / "node", models_dir=shared_models_dir, extra_env=env)
    node.start()
    try:
        assert node.process is not None
        pid = node.process.pid
        # The node settles as its own master first (after mDNS's discovery grace), so
        # the flood meets a running node, and its start-up sockets are all open. A
        # peer discovered before then holds off its lone election for a while more,
        # and the topology checked below would still be empty.
        wait_for(lambda: members(node) == 1, "the node to elect itself", 60)
        before = _open_fds(pid)

        async def scenario() -> int:
            stranger = await _flood(FAKES)
            try:

                def refused() -> int:
                    cluster = node.get("/v1/diagnostics/node").json()["cluster"]
                    dropped: int = cluster["frames"]["dropped"].get("discovery_limit", 0)
                    return dropped

                await asyncio.to_thread(
                    wait_for,
                    lambda: refused() >= FAKES - MAX_PENDING_DIALS - 16,
                    "the node to refuse dials beyond its bound",
                    60,
                )
                return _open_fds(pid)
            finally:
                await stranger.async_close()

        during = asyncio.run(scenario())
        assert during - before <= MAX_PENDING_DIALS * FDS_PER_DIAL + SLACK_FDS, (before, during)
        # Still a node: it answers, and it never took a fake service for a member.
        assert node.get("/node_id").status_code == 200
        assert members(node) == 1
    finally:
        node.kill()
