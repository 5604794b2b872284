"""Two daemons started as one cluster, joined on the fabric both ways."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.daemon.serving import wait_for
from tests.daemon.test_cluster import converged
from tests.daemon_process import DaemonProcess


@contextlib.contextmanager
def linked_pair(
    root: Path, models_dir: Path, extra_env: Mapping[str, str] | None = None
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    """Two nodes sharing ``models_dir``: both converged on a 2-node cluster and each
    fabric edge up (a pool's driver reaches its donor at the address the edge names).
    Both are killed on exit."""
    env = dict(extra_env or {})
    first = DaemonProcess(root=root / "a", models_dir=models_dir, extra_env=env)
    second = DaemonProcess(
        root=root / "b", models_dir=models_dir, peers=[first.fabric_address], extra_env=env
    )
    try:
        first.start()
        second.start()
        wait_for(lambda: converged([first, second], 2), "two nodes to converge", timeout=60)
        wait_for(
            lambda: len(first.get("/state").json()["topology"]["connections"]) >= 2 or None,
            "both fabric edges",
            timeout=30,
        )
        yield first, second
    finally:
        first.kill()
        second.kill()
