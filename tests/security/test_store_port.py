"""The store port (``model_store.store_port``) under the API port's authority policy.

Issue #36: a DNS-rebound page reached the store's delete handler (which evicts the
model cluster-wide), and a cross-site ``text/plain`` POST reached its download handler.
The store port now refuses a ``Host`` that does not name the node (421), a body that is
not JSON (415) and anything from a browser (403); it serves this cluster's nodes
(this machine, private-LAN and CGNAT peers) and takes imports from this machine only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon_process import DaemonProcess, free_port
from tests.security.lan import CGNAT_HOST, PRIVATE_HOST, PUBLIC_HOST, Lan

# NOTE: the "network" group: tests/security/lan.py's LAN has fixed addresses, and two
# made at once on two workers route each other's replies astray (connects timed out).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("network")]

MODEL = "org%2Fmodel"


@pytest.fixture(scope="module")
def store(
    network: Lan, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, int]]:
    root = tmp_path_factory.mktemp("store-port")
    port = free_port()
    daemon = DaemonProcess(
        root=root / "node", models_dir=shared_models_dir, extra_args=["--host", "0.0.0.0"]
    )
    daemon.config_home.mkdir(parents=True, exist_ok=True)
    (daemon.config_home / "skulk.yaml").write_text(
        "model_store:\n"
        "  store_host: true\n"
        f"  store_path: {root / 'canonical'}\n"
        f"  store_port: {port}\n"
    )
    daemon.start()
    try:
        yield daemon, port
    finally:
        daemon.kill()


def _refused(answer: httpx.Response | dict[str, Any], status: int, code: str) -> None:
    if isinstance(answer, dict):
        assert answer["status"] == status, answer
        body = httpx.Response(200, text=answer["body"]).json()
    else:
        assert answer.status_code == status, answer.text
        body = answer.json()
    assert body["error"]["code"] == code, body
    assert body["error"]["status"] == status, body
    assert body["error"]["message"], body


def test_a_dns_rebound_page_cannot_reach_the_store(store: tuple[DaemonProcess, int]) -> None:
    _, port = store
    base = f"http://127.0.0.1:{port}"
    rebound = {"Host": "evil.example"}
    _refused(httpx.delete(f"{base}/models/{MODEL}", headers=rebound), 421, "misdirected_host")
    _refused(httpx.get(f"{base}/health", headers=rebound), 421, "misdirected_host")
    _refused(
        httpx.get(f"{base}/models/{MODEL}/files", headers={"Host": "evil.example:80"}),
        421,
        "misdirected_host",
    )


def test_a_cross_site_simple_post_cannot_start_a_download(
    store: tuple[DaemonProcess, int],
) -> None:
    _, port = store
    url = f"http://127.0.0.1:{port}/models/{MODEL}/download"
    simple = httpx.post(url, content=b"{}", headers={"Content-Type": "text/plain"})
    _refused(simple, 415, "unsupported_media_type")
    # A page's body without any Content-Type still carries its Origin.
    untyped = httpx.post(url, content=b"{}", headers={"Origin": "https://evil.example"})
    _refused(untyped, 403, "cross_origin")
    page = {"Origin": "https://evil.example"}
    _refused(httpx.post(url, json={}, headers=page), 403, "cross_origin")
    _refused(
        httpx.delete(f"http://127.0.0.1:{port}/models/{MODEL}", headers=page), 403, "cross_origin"
    )
    # No browser has business on the store port: even its reads and its own origin.
    _refused(httpx.get(f"http://127.0.0.1:{port}/health", headers=page), 403, "cross_origin")
    own = {"Origin": f"http://127.0.0.1:{port}"}
    _refused(httpx.get(f"http://127.0.0.1:{port}/models", headers=own), 403, "cross_origin")


def test_this_machine_is_served_as_before(store: tuple[DaemonProcess, int]) -> None:
    _, port = store
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{base}/models").json() == []
    assert httpx.get(f"{base}/health").status_code == 200
    gone = httpx.delete(f"{base}/models/{MODEL}")
    assert gone.status_code == 404, gone.text
    # Reached the import handler (a malformed request), not refused at the door.
    malformed = httpx.post(f"{base}/imports", json={})
    assert malformed.status_code == 400, malformed.text


def test_cluster_peers_are_served_and_strangers_are_not(
    store: tuple[DaemonProcess, int], network: Lan
) -> None:
    _, port = store
    private, cgnat, public, lan_import, forwarded = network.requests(
        {"method": "GET", "url": f"http://{PRIVATE_HOST}:{port}/models"},
        {"method": "GET", "url": f"http://{CGNAT_HOST}:{port}/health"},
        {"method": "DELETE", "url": f"http://{PUBLIC_HOST}:{port}/models/{MODEL}"},
        {"method": "POST", "url": f"http://{PRIVATE_HOST}:{port}/imports", "json": {}},
        {
            "method": "GET",
            "url": f"http://{PRIVATE_HOST}:{port}/models",
            "headers": {"X-Forwarded-For": "203.0.113.9"},
        },
    )
    assert private["status"] == 200, private
    assert cgnat["status"] == 200, cgnat
    _refused(public, 403, "untrusted_peer")
    _refused(lan_import, 403, "loopback_required")
    _refused(forwarded, 403, "forwarded_request")
