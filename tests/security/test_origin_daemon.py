"""Finding (issue #36, low): the Origin check exempted whole address classes. A page on
any LAN address, or on another port of this machine, could send body-less POSTs
(``/admin/restart`` ran) and open WebSockets. Now a mutation or a WebSocket is accepted
from a browser only with one of the node's own origins (its name on the port it serves)
or a configured ``api.cors_origins`` entry. Reproduced on a real daemon with the
headers a browser sends and a real WebSocket client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

CORS_ORIGIN = "http://dashboard.example:8080"
HOSTILE = ("http://192.168.1.5", "http://127.0.0.1:9999", "http://localhost:9999")


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess(root=tmp_path_factory.mktemp("origin"), models_dir=shared_models_dir)
    daemon.config_home.mkdir(parents=True, exist_ok=True)
    (daemon.config_home / "skulk.yaml").write_text(f"api:\n  cors_origins: ['{CORS_ORIGIN}']\n")
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.kill()


def own_origins(node: DaemonProcess) -> tuple[str, ...]:
    return (node.url, f"http://localhost:{node.port}", CORS_ORIGIN)


def websocket_status(node: DaemonProcess, origin: str) -> int:
    """The handshake's status: 101 when the socket opened."""
    url = node.url.replace("http://", "ws://") + "/v1/realtime?model=local/none"
    try:
        with connect(url, origin=Origin(origin), open_timeout=30.0):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


def test_other_sites_on_lan_addresses_or_local_ports_are_refused(node: DaemonProcess) -> None:
    for origin in HOSTILE:
        restart = httpx.post(f"{node.url}/admin/restart", headers={"Origin": origin}, timeout=30)
        assert restart.status_code == 403, (origin, restart.text)
        assert restart.json()["error"]["code"] == "cross_origin"
        assert websocket_status(node, origin) == 403, origin
    # Nothing restarted: the same process still answers.
    assert node.process is not None and node.process.poll() is None
    assert node.get("/node_id").status_code == 200


def test_the_nodes_own_origins_and_configured_ones_pass(node: DaemonProcess) -> None:
    for origin in own_origins(node):
        # Past the authority check, a body-less placement is refused by the handler.
        placed = httpx.post(f"{node.url}/place_instance", headers={"Origin": origin}, timeout=30)
        assert placed.status_code == 400, (origin, placed.text)
        assert websocket_status(node, origin) == 101, origin
