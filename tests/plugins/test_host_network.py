"""``GET /v1/plugins/host-network`` on a real daemon subprocess and the real in-process
app.

The daemon's fabric is started on ``--fabric-port 0``: the route reports the port the
OS assigned, which the daemon's process (seen by psutil from outside) is listening on
and a plain TCP connect reaches; the answer has exactly the spec's fields, its node id
is the node's, its fingerprint the domain-separated digest, and it never carries the
raw namespace or the cluster key. A paired bearer without ``plugins:read`` is refused,
with it admitted. On the in-process app (no fabric at all): 503, the direct-owner and
guard refusals, and 429 while the four read slots are held, each with
``Cache-Control: no-store``; the two-second deadline answers 503 and keeps the slot
until the stuck observation ends.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from skulk_cli.client import SkulkClient
from skulk_core.plugins.host_attachment import HostNetwork
from skulk_daemon.api.host_network import READ_DEADLINE_SECONDS, READS, ReadSlots, read_within
from skulk_daemon.errors import ApiError
from skulk_daemon.node.keys import derive_curve_keys
from skulk_daemon.operator.service import OperatorPairingService
from tests.api.in_process import AppNode
from tests.daemon.pairing import Device, pair_in_process, set_scopes
from tests.daemon_process import TEST_ENV, DaemonProcess

pytestmark = pytest.mark.xdist_group("timing")

PATH = "/v1/plugins/host-network"
OWNER = {"X-Skulk-Dashboard": "pairing-v1"}
FIELDS = {
    "nodeId",
    "networkVersion",
    "namespaceFingerprint",
    "controlEndpoints",
    "dataTransport",
    "dataEndpoints",
}


def no_store(response: httpx.Response) -> httpx.Response:
    assert response.headers.get("cache-control", "").startswith("no-store"), response.headers
    return response


def refused(response: httpx.Response, status: int, fragment: str = "") -> None:
    assert no_store(response).status_code == status, response.text
    assert fragment in response.json()["error"]["message"], response.text


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    node = DaemonProcess(
        root=tmp_path_factory.mktemp("host-network-daemon"),
        models_dir=shared_models_dir,
        fabric_port=0,
    )
    try:
        yield node.start()
    finally:
        node.kill()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppNode]:
    root = tmp_path_factory.mktemp("host-network-app")
    with AppNode(root=root / "node", models_dir=root / "models") as node:
        yield node


def test_the_daemon_reports_its_live_os_assigned_fabric_port(daemon: DaemonProcess) -> None:
    response = no_store(daemon.get(PATH, headers=OWNER))
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == FIELDS
    assert body["nodeId"] == daemon.get("/node_id").json()
    assert body["networkVersion"] == "3"
    # The namespace is the cluster's: the ZAP domain and the CURVE server key its
    # cluster key derives (another cluster's nodes get another fingerprint).
    server_key = derive_curve_keys(TEST_ENV["SKULK_CLUSTER_KEY"].encode()).server_public
    token = f"skulk:{server_key.decode()}/{body['networkVersion']}".encode()
    expected = hashlib.sha256(b"skulk-host-attachment-v1\x00" + token).hexdigest()
    assert body["namespaceFingerprint"] == expected
    assert server_key.decode() not in response.text  # the digest only, never the namespace
    assert body["dataTransport"] == "zmq"

    [endpoint] = body["controlEndpoints"]
    assert endpoint["host"] == "127.0.0.1"
    port = endpoint["port"]
    assert isinstance(port, int) and 0 < port < 65536
    # The daemon was told port 0; the OS chose this one and the daemon listens on it.
    assert daemon.process is not None
    listening = {
        c.laddr.port
        for c in psutil.Process(daemon.process.pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }
    assert port in listening and port != daemon.port
    with socket.create_connection((endpoint["host"], port), timeout=5):
        pass
    # The data plane rides the same ROUTER.
    assert body["dataEndpoints"] == body["controlEndpoints"]
    assert "skulk/3" not in response.text
    assert TEST_ENV["SKULK_CLUSTER_KEY"] not in response.text
    # The CLI's client reads the same live answer as the dashboard's owner.
    with SkulkClient(daemon.url) as client:
        assert client.host_network() == body


def test_a_paired_bearer_needs_plugins_read(daemon: DaemonProcess) -> None:
    service = OperatorPairingService.open(daemon.data_dir)
    issue = service.create_session("https://127.0.0.1:1", initialize=True)
    device = pair_in_process(service, issue.uri, Device())
    bearer = {**OWNER, **device.bearer}
    refused(daemon.get(PATH, headers=bearer), 403, "plugins:read")  # pairing grants none
    refused(daemon.get(PATH, headers={**OWNER, "Authorization": "Bearer not-a-token"}), 401)
    set_scopes(daemon.data_dir, device.device_id, ["plugins:read"])
    admitted = no_store(daemon.get(PATH, headers=bearer))
    assert admitted.status_code == 200, admitted.text
    assert set(admitted.json()) == FIELDS
    assert device.credentials["accessToken"] not in admitted.text


def test_without_a_fabric_the_read_is_503_and_every_refusal_is_no_store(app: AppNode) -> None:
    refused(app.get(PATH, headers=OWNER), 503, "runs no fabric")
    refused(app.get(PATH), 403, "X-Skulk-Dashboard")
    # The guard's own refusal (a forwarded request never reaches the handler).
    refused(app.get(PATH, headers={**OWNER, "X-Forwarded-For": "203.0.113.9"}), 403)
    assert READS.held == 0


def test_the_fifth_concurrent_read_is_refused_with_429(app: AppNode) -> None:
    with READS.occupied(3):
        refused(app.get(PATH, headers=OWNER), 503)  # the fourth slot is still free
    with READS.occupied(4):
        refused(app.get(PATH, headers=OWNER), 429, "at most 4 host-network reads")
        refused(app.get(PATH), 403)  # authority is decided before admission
    refused(app.get(PATH, headers=OWNER), 503)
    assert READS.held == 0


def test_the_deadline_answers_503_and_the_slot_waits_for_the_observation() -> None:
    slots = ReadSlots(1)
    stuck = threading.Event()

    def observation() -> HostNetwork:
        stuck.wait(30)
        raise AssertionError("unreachable once released")

    async def read() -> None:
        started = time.monotonic()
        with pytest.raises(ApiError) as caught:
            await read_within(slots, observation)
        elapsed = time.monotonic() - started
        assert caught.value.status_code == 503 and caught.value.code == "timeout"
        assert READ_DEADLINE_SECONDS <= elapsed < READ_DEADLINE_SECONDS + 3
        assert slots.held == 1  # still observing: a second read is refused
        with pytest.raises(ApiError) as busy:
            await read_within(slots, observation)
        assert busy.value.status_code == 429
        stuck.set()
        for _ in range(100):
            if slots.held == 0:
                break
            await asyncio.sleep(0.02)
        assert slots.held == 0

    asyncio.run(read())


def test_the_openapi_document_describes_the_answer(app: AppNode) -> None:
    document = app.get("/api/openapi.json").json()
    operation = document["paths"][PATH]["get"]
    assert {"200", "403", "429", "503"} <= set(operation["responses"])
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
    name = ok["$ref"].rpartition("/")[2]
    schema = document["components"]["schemas"][name]
    assert set(schema["properties"]) == FIELDS
