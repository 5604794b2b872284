"""The operator listener: a node becoming a gateway, pinned TLS, bearer scopes.

One daemon serves the module: it starts as an ordinary node (ephemeral operator port),
refuses the pairing routes as a non-gateway, then ``pair`` initializes it while it runs
and the listener comes up. The tests after that use the listener over TLS pinned to the
gateway certificate.
"""

from __future__ import annotations

import re
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from skulk_core.operator.encoding import public_key_fingerprint
from skulk_core.operator.package import decode_pairing_uri
from skulk_core.operator.scopes import CHAT_WRITE, CLUSTER_READ, MODELS_READ, PAIRED_SCOPES
from skulk_daemon.errors import ApiError
from skulk_daemon.operator.guards import check_direct_owner, peer_kind
from skulk_daemon.system.settings import DEFAULT_OPERATOR_API_PORT, resolve_settings
from tests.daemon.pairing import (
    CHALLENGE,
    DEVICES,
    EXCHANGE,
    INVITATIONS,
    TOKEN,
    Device,
    gateway_cert,
    host_tool,
    pair,
    pinned_client,
    set_scopes,
    wait_for_listener,
)
from tests.daemon_process import DaemonProcess, free_port

SERVING = re.compile(r"operator listener serving on https://127\.0\.0\.1:(\d+)")
DASHBOARD = {"X-Skulk-Dashboard": "pairing-v1"}
LISTENER_START_TIMEOUT = 30.0


@dataclass
class Listener:
    port: int
    cert: str
    pairing: dict[str, Any]


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess(
        root=tmp_path_factory.mktemp("operator-listener"),
        models_dir=shared_models_dir,
        extra_env={"SKULK_OPERATOR_API_PORT": "0"},
    )
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.kill()


@pytest.fixture(scope="module")
def listener(node: DaemonProcess) -> Listener:
    """``pair`` on the running node's host: the listener starts without a restart."""
    pairing = host_tool(node.data_dir, "pair", "--exchange-url", "https://127.0.0.1:52417")
    deadline = time.monotonic() + LISTENER_START_TIMEOUT
    while (found := SERVING.search(node.log_text())) is None:
        assert time.monotonic() < deadline, node.log_text()
        time.sleep(0.1)
    port = int(found.group(1))
    cert = gateway_cert(node.data_dir)
    wait_for_listener(port, cert)
    return Listener(port=port, cert=cert, pairing=pairing)


def _status(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"] if status >= 400 else {}
    return error


@pytest.mark.slow
def test_a_node_that_is_not_a_gateway_refuses_pairing(node: DaemonProcess) -> None:
    with httpx.Client(base_url=node.url, timeout=30.0) as api:
        body = {"nonce": "x" * 43, "deviceName": "phone", "devicePublicKey": Device().public_key}
        assert _status(api.post(CHALLENGE, json=body), 503)["code"] == "not_gateway"
        assert _status(api.post(EXCHANGE, json={"nonce": "x" * 43, "signature": "AA"}), 503)
        token = {"deviceId": str(uuid.uuid4()), "refreshToken": "y" * 43}
        _status(api.post(TOKEN, json=token), 401)
        _status(api.get(DEVICES, headers={"Authorization": "Bearer " + "z" * 43}), 401)
        dashboard = {**DASHBOARD, "Origin": node.url}
        assert (
            "not the operator gateway"
            in _status(api.get(DEVICES, headers=dashboard), 409)["message"]
        )
        for request in (
            api.build_request("GET", INVITATIONS, headers=dashboard),
            api.build_request(
                "POST",
                INVITATIONS,
                json={"validForSeconds": 60, "maxPairings": 1},
                headers=dashboard,
            ),
            api.build_request("DELETE", f"{INVITATIONS}/{uuid.uuid4()}", headers=dashboard),
        ):
            assert "configure-relay" in _status(api.send(request), 409)["message"]
    assert SERVING.search(node.log_text()) is None  # no listener on a plain node


@pytest.mark.slow
def test_the_listener_starts_when_pair_initializes_a_running_node(
    node: DaemonProcess, listener: Listener
) -> None:
    assert listener.port != DEFAULT_OPERATOR_API_PORT  # port 0: the kernel's choice, logged
    with httpx.Client(base_url=node.url, timeout=30.0) as api:
        dashboard = {**DASHBOARD, "Origin": node.url}
        # A gateway without relay access has no route for a dashboard invitation.
        refused = _status(api.get(INVITATIONS, headers=dashboard), 409)
        assert refused["code"] == "relay_not_configured"
        assert api.get(DEVICES, headers=dashboard).json() == {"devices": []}


@pytest.mark.slow
def test_tls_is_pinned_to_the_packaged_fingerprint(listener: Listener) -> None:
    package = decode_pairing_uri(listener.pairing["uri"])
    context = ssl.create_default_context(cadata=listener.cert)
    with (
        socket.create_connection(("127.0.0.1", listener.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        served = tls.getpeercert(binary_form=True)
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    assert served is not None
    spki = (
        x509.load_der_x509_certificate(served)
        .public_key()
        .public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    )
    assert public_key_fingerprint(spki) == package.fingerprint == listener.pairing["fingerprint"]

    with pytest.raises(httpx.ConnectError):  # not trusted without the pin
        httpx.get(f"https://127.0.0.1:{listener.port}/node_id", timeout=10)
    with pytest.raises(httpx.TransportError):  # and never served in cleartext
        httpx.get(f"http://127.0.0.1:{listener.port}/node_id", timeout=10)


@pytest.mark.slow
def test_bearer_and_scopes_on_the_listener(node: DaemonProcess, listener: Listener) -> None:
    with pinned_client(listener.port, listener.cert) as operator:
        # The pre-auth routes are the only ones open without a bearer.
        for path in ("/state", "/v1/models", "/node_id", "/config"):
            refused = operator.get(path)
            assert _status(refused, 401)["code"] == "missing_bearer"
            assert refused.headers["www-authenticate"] == "Bearer"
        device = pair(operator, listener.pairing["uri"], Device(name="listener phone"))
        assert set(device.credentials["scopes"]) == set(PAIRED_SCOPES)

        state = operator.get("/state", headers=device.bearer)
        assert state.status_code == 200 and "instances" in state.json()
        assert operator.get("/v1/models", headers=device.bearer).status_code == 200
        assert operator.post("/onboarding", headers=device.bearer).status_code == 200
        devices = operator.get(DEVICES, headers=device.bearer)
        assert devices.status_code == 200
        assert [r["current"] for r in devices.json()["devices"]] == [True]

        for authorization in ("Bearer " + "A" * 43, "Bearer", "Token abc", "Bearer a b"):
            _status(operator.get("/state", headers={"Authorization": authorization}), 401)

        # Invitation management is never available here, even with every scope, and the
        # dashboard marker does not turn a relayed request into the owner.
        full = {**device.bearer, **DASHBOARD}
        assert _status(operator.get(INVITATIONS, headers=full), 403)["code"] == "direct_owner_only"
        _status(operator.post(INVITATIONS, json={"validForSeconds": 60, "maxPairings": 1}), 403)
        _status(operator.get(DEVICES, headers=DASHBOARD), 401)

        # Narrower scopes: each route needs its own.
        set_scopes(node.data_dir, device.device_id, [MODELS_READ])
        assert operator.get("/v1/models", headers=device.bearer).status_code == 200
        missing = _status(operator.get("/state", headers=device.bearer), 403)
        assert missing["code"] == "insufficient_scope" and CLUSTER_READ in missing["message"]
        set_scopes(node.data_dir, device.device_id, [CLUSTER_READ, MODELS_READ, CHAT_WRITE])
        assert operator.get("/state", headers=device.bearer).status_code == 200
        before = node.get("/config").json()["config"]
        refused = operator.put(
            "/config", json={"logging": {"level": "debug"}}, headers=device.bearer
        )
        assert "operations:write" in _status(refused, 403)["message"]
        assert node.get("/config").json()["config"] == before
        _status(operator.post("/onboarding", headers=device.bearer), 403)
        _status(operator.get(DEVICES, headers=device.bearer), 403)
        set_scopes(node.data_dir, device.device_id, [CLUSTER_READ])
        chat = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
        assert (
            "chat:write"
            in _status(
                operator.post("/v1/chat/completions", json=chat, headers=device.bearer), 403
            )["message"]
        )

        # A revoked device is unknown from then on (401), on every route.
        set_scopes(node.data_dir, device.device_id, list(PAIRED_SCOPES))
        revoked = operator.delete(f"{DEVICES}/{device.device_id}", headers=device.bearer)
        assert revoked.status_code == 204
        for path in ("/state", "/v1/models", DEVICES):
            _status(operator.get(path, headers=device.bearer), 401)
        token = {"deviceId": device.device_id, "refreshToken": device.credentials["refreshToken"]}
        _status(operator.post(TOKEN, json=token), 401)
    log = node.log_text()
    for secret in (device.credentials["accessToken"], device.credentials["refreshToken"]):
        assert secret not in log
    assert decode_pairing_uri(listener.pairing["uri"]).nonce not in log


@pytest.mark.slow
def test_the_node_stops_cleanly_with_the_listener(node: DaemonProcess, listener: Listener) -> None:
    code, log = node.stop()
    assert code == 0, log
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection(("127.0.0.1", listener.port), timeout=5),
    ):
        pass


@pytest.mark.slow
def test_a_taken_operator_port_is_one_start_up_line(
    tmp_path: Path, shared_models_dir: Path
) -> None:
    port = free_port()
    daemon = DaemonProcess(
        root=tmp_path / "taken",
        models_dir=shared_models_dir,
        extra_args=["--operator-api-port", str(port)],
    )
    daemon.data_dir.mkdir(parents=True)
    host_tool(daemon.data_dir, "pair", "--exchange-url", f"https://127.0.0.1:{port}")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        code, output = daemon.run_to_exit()
    assert code == 1
    assert f"operator listener port {port} on 127.0.0.1 is already in use" in output
    assert "--operator-api-port" in output and "Traceback" not in output


def test_operator_port_settings() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("SKULK_OPERATOR_API_PORT", raising=False)
        assert resolve_settings().operator_api_port is None  # the stored port, or 52417
        patch.setenv("SKULK_OPERATOR_API_PORT", "0")
        assert resolve_settings().operator_api_port == 0
        assert resolve_settings(operator_api_port=52499).operator_api_port == 52499
        patch.setenv("SKULK_OPERATOR_API_PORT", "seventy")
        with pytest.raises(ValueError, match="SKULK_OPERATOR_API_PORT"):
            resolve_settings()
    with pytest.raises(ValueError, match="--operator-api-port"):
        resolve_settings(operator_api_port=70000)


def _scope(peer: str, **headers: str) -> Any:
    return {
        "type": "http",
        "scheme": "http",
        "server": ("127.0.0.1", 52415),
        "client": (peer, 50000),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "state": {},
    }


@pytest.mark.parametrize(
    ("peer", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("100.64.0.1", "tailscale"),
        ("100.127.255.254", "tailscale"),
        ("fd7a:115c:a1e0::1", "tailscale"),
        ("100.128.0.1", "other"),
        ("192.168.1.20", "other"),
        ("10.0.0.2", "other"),
        ("not-an-address", "other"),
    ],
)
def test_peers_are_classified(peer: str, kind: str) -> None:
    assert peer_kind(peer) == kind


@pytest.mark.parametrize(
    ("peer", "code"),
    [
        ("100.100.1.2", "unverified_peer"),
        ("fd7a:115c:a1e0::7", "unverified_peer"),
        ("192.168.1.20", "untrusted_peer"),
    ],
)
def test_only_a_loopback_peer_is_the_direct_owner(peer: str, code: str) -> None:
    headers = {"host": "localhost:52415", "x-skulk-dashboard": "pairing-v1"}
    check_direct_owner(_scope("127.0.0.1", **headers))  # the admitted baseline
    with pytest.raises(ApiError) as refused:
        check_direct_owner(_scope(peer, **headers))
    assert refused.value.status_code == 403
    assert refused.value.code == code
    assert "http://localhost:52415" in refused.value.message
