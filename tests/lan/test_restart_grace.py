"""The unit-level guard of what the namespaced LAN found: a node restarted beside a
sitting master, whose peers mDNS has found but which has heard none of them yet, must
not elect itself alone (it claimed the master's term and deposed it on the tiebreak)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from skulk_daemon.fabric.cluster import LONELY_GRACE_SECONDS
from tests.daemon.test_fabric_fuzz import harness


def test_a_discovered_peer_holds_off_a_lone_election(shared_models_dir: Path) -> None:
    async def scenario() -> None:
        async with harness(shared_models_dir) as h:
            election = h.agent.election
            election.discovery_grace = 0.0  # the harness waits an hour; a node 2.5 s
            assert election.lonely_grace == 0.0  # no explicit peers
            h.agent.dial_discovered("10.9.0.1:52416")
            assert election.lonely_grace == LONELY_GRACE_SECONDS
            h.clock.now += 3.0
            h.agent._tick()
            assert election.role == "follower" and election.session is None
            # Nobody ever answers: past the grace it serves alone.
            h.clock.now += LONELY_GRACE_SECONDS
            h.agent._tick()
            assert h.agent.election.role == "master"

    asyncio.run(scenario())
