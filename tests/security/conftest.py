"""Fixtures the daemon-level attack modules share: the namespaces that play remote
callers, and a node reachable from them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon_process import DaemonProcess
from tests.security.lan import Lan, lan


@pytest.fixture(scope="module")
def network() -> Iterator[Lan]:
    """LAN, CGNAT and public-address callers in network namespaces (``lan.py``)."""
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
