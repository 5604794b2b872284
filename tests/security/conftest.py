"""Fixtures the daemon-level attack modules share: the namespaces that play remote
callers, and a node reachable from them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon_process import DaemonProcess
from tests.security.lan import Lan, lan


@pytest.fixture(scope="module")
def network(request: pytest.FixtureRequest) -> Iterator[Lan]:
    """LAN, CGNAT and public-address callers in network namespaces (``lan.py``). Its
    addresses are fixed, so only a module in the ``network`` xdist group may make one."""
    group = request.node.get_closest_marker("xdist_group")
    if group is None or group.args[:1] != ("network",):
        pytest.fail(f"{request.node.nodeid} needs pytest.mark.xdist_group('network')")
    with lan() as made:
        yield made


@pytest.fixture(scope="module")
def node(
    network: Lan, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    """One daemon per module on every address, so the namespaces reach it."""
    daemon = DaemonProcess(
        root=tmp_path_factory.mktemp("lan-node"),
        models_dir=shared_models_dir,
        extra_args=["--host", "0.0.0.0"],
    )
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.kill()
