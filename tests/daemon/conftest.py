from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.serving import place
from tests.daemon_process import DaemonProcess


@pytest.fixture(scope="session")
def demo_served(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, str]]:
    """One daemon serving the demo model, shared by the wire-format suites.

    Tests using it must leave it idle (no generation left running) when they end.
    """
    daemon = DaemonProcess(
        root=tmp_path_factory.mktemp("demo-served"), models_dir=shared_models_dir
    )
    daemon.start()
    try:
        yield daemon, place(daemon)
    finally:
        daemon.kill()
