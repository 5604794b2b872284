"""Real daemons on the namespaced LAN: one per machine, default ports, mDNS on."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.daemon_process import DaemonProcess
from tests.lan.netns import Lan, Machine, lan

API_PORT = 52415
FABRIC_PORT = 52416


@dataclass
class LanDaemon(DaemonProcess):
    """:class:`DaemonProcess` run with ``ip netns exec`` in its machine's namespace.

    Each namespace has its own stack, so every daemon uses the default ports, binds
    ``0.0.0.0`` and finds its peers by mDNS alone (no ``--peer``); the test process
    reaches it at the machine's address across the bridge.
    """

    machine: Machine | None = None
    port: int = API_PORT
    fabric_port: int = FABRIC_PORT
    bind_host: str = "0.0.0.0"

    @property
    def address(self) -> str:
        assert self.machine is not None
        return self.machine.address

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    @property
    def fabric_address(self) -> str:
        return f"{self.address}:{self.fabric_port}"

    def argv(self) -> list[str]:
        assert self.machine is not None
        # ``ip netns exec`` execs the command: the process signalled is the daemon itself.
        return ["ip", "netns", "exec", self.machine.namespace, *super().argv()]


def cluster_env() -> dict[str, str]:
    """mDNS on, and a cluster key of this test's own (no other run's daemons join)."""
    return {"SKULK_MDNS": "1", "SKULK_CLUSTER_KEY": f"skulk-lan-{secrets.token_hex(16)}"}


@contextmanager
def lan_cluster(root: Path, models_dir: Path, count: int) -> Iterator[tuple[Lan, list[LanDaemon]]]:
    """``count`` machines, each running a daemon started at the same moment."""
    env = cluster_env()
    with lan(count) as net:
        daemons = [
            LanDaemon(
                root=root / f"node{i}",
                models_dir=models_dir,
                machine=machine,
                extra_env=dict(env),
            )
            for i, machine in enumerate(net.machines)
        ]
        try:
            for daemon in daemons:
                daemon.spawn()
            for daemon in daemons:
                daemon.wait_ready()
            yield net, daemons
        finally:
            for daemon in daemons:
                daemon.kill()
