"""A flood of fake mDNS services cannot exhaust the node's sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

from skulk_daemon.fabric.peers import DIAL_GRACE_SECONDS, MAX_PENDING_DIALS, PendingDials
from tests.daemon.test_fabric_fuzz import harness


def test_pending_dials_are_bounded_and_expire() -> None:
    pending = PendingDials(limit=2, grace=10.0)
    assert pending.admit("a:1", 0.0) and pending.admit("b:1", 0.0)
    assert not pending.admit("c:1", 0.0)
    assert pending.refused == 1
    assert pending.admit("a:1", 1.0)  # already pending: no new socket
    pending.answered("a:1")
    assert pending.expired(5.0) == []
    assert pending.expired(10.5) == ["b:1"]
    assert pending.admit("c:1", 11.0)


def test_discovered_strangers_are_capped_and_hung_up_on(shared_models_dir: Path) -> None:
    async def scenario() -> None:
        async with harness(shared_models_dir) as h:
            fakes = [f"10.9.{i // 250}.{i % 250 + 1}:52416" for i in range(1000)]
            for address in fakes:
                h.agent.dial_discovered(address)
            dialed = h.transport.connected & set(fakes)
            assert len(dialed) == MAX_PENDING_DIALS
            dropped = h.agent.diagnostics()["frames"]["dropped"]
            assert dropped["discovery_limit"] == len(fakes) - MAX_PENDING_DIALS
            # None of them ever answers as a member: past the grace all are hung up on.
            h.clock.now += DIAL_GRACE_SECONDS + 1
            h.agent._tick()
            assert not set(fakes) & h.transport.connected
            # A departed service is hung up on at once; a live member never is.
            h.agent.dial_discovered(fakes[0])
            h.agent.departed(fakes[0])
            assert fakes[0] not in h.transport.connected

    asyncio.run(scenario())
