"""Two daemons with no peers configured find each other through mDNS and form one
cluster. Skipped, with the reason, where this machine cannot multicast on loopback."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from tests.daemon.fabric_probe import loopback_mdns_problem
from tests.daemon.serving import wait_for
from tests.daemon.test_cluster import converged
from tests.daemon_process import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("network")]


def test_two_daemons_without_peers_find_each_other_over_mdns(
    tmp_path: Path, shared_models_dir: Path
) -> None:
    problem = loopback_mdns_problem()
    if problem is not None:
        pytest.skip(f"loopback multicast unusable here: {problem}")
    # A key of their own: any other Skulk node announcing itself on this machine
    # (another test run, a developer's node) is then refused, not joined.
    env = {"SKULK_MDNS": "1", "SKULK_CLUSTER_KEY": f"mdns-test-{secrets.token_hex(16)}"}
    nodes = [
        DaemonProcess(root=tmp_path / name, models_dir=shared_models_dir, extra_env=env)
        for name in ("a", "b")
    ]
    try:
        for node in nodes:
            node.start()
        view = wait_for(lambda: converged(nodes, 2), "mDNS discovery and one cluster", timeout=60)
        assert len(view["topology"]["nodes"]) == 2
    finally:
        for node in nodes:
            node.kill()
