"""``/v1/auth/*`` on a real gateway daemon: pairing, rotation, devices, invitations.

One relay-configured gateway serves the module (daemon starts are expensive here); each
test makes its own sessions, invitations and devices on it. The last test reads the
daemon's log for every secret the others saw.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from skulk_core.operator.package import InvitationPackage, decode_pairing_uri
from skulk_core.operator.scopes import CLUSTER_READ, PAIRED_SCOPES
from skulk_core.operator.transcripts import pairing_signature_message
from tests.daemon.pairing import (
    CHALLENGE,
    DEVICES,
    EXCHANGE,
    INVITATIONS,
    TOKEN,
    Device,
    challenge,
    gateway_cert,
    host_tool,
    pair,
    pair_in_process,
    past_service,
    pinned_client,
    proof,
    relay_provisioning,
    set_scopes,
    wait_for_listener,
)
from tests.daemon_process import DaemonProcess, free_port

pytestmark = pytest.mark.slow

APP_CREDENTIAL = "app-carrier-credential-0123456789"
DASHBOARD = {"X-Skulk-Dashboard": "pairing-v1"}


@dataclass
class Gateway:
    daemon: DaemonProcess
    operator_port: int
    cert: str
    api: httpx.Client
    # Every nonce, token, signature and pairing code a test saw: none may reach the log.
    secrets: list[str] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return self.daemon.data_dir

    def session(self) -> str:
        uri = host_tool(
            self.data_dir, "pair", "--exchange-url", f"https://127.0.0.1:{self.operator_port}"
        )["uri"]
        self.secrets += [uri, decode_pairing_uri(uri).nonce]
        return str(uri)

    def dashboard(self) -> dict[str, str]:
        return {**DASHBOARD, "Origin": self.daemon.url}

    def invitation(self, *, max_pairings: int = 10, valid_for: int = 3600) -> str:
        created = self.api.post(
            INVITATIONS,
            json={"validForSeconds": valid_for, "maxPairings": max_pairings},
            headers=self.dashboard(),
        )
        assert created.status_code == 201, created.text
        code = str(created.json()["pairingCode"])
        self.secrets += [code, decode_pairing_uri(code).nonce]
        return code

    def pair(self, uri: str | None = None, name: str = "Test phone") -> Device:
        device = pair(self.api, uri or self.session(), Device(name=name))
        self.keep(device)
        return device

    def keep(self, device: Device) -> None:
        self.secrets += [device.credentials["accessToken"], device.credentials["refreshToken"]]

    def listener(self) -> httpx.Client:
        return pinned_client(self.operator_port, self.cert)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[Gateway]:
    root = tmp_path_factory.mktemp("auth-api")
    port = free_port()
    # No --operator-api-port: the listener takes the port configure-relay stored.
    daemon = DaemonProcess(root=root, models_dir=shared_models_dir)
    daemon.data_dir.mkdir(parents=True)
    provisioning = relay_provisioning(root / "provisioning.json", credential=APP_CREDENTIAL)
    host_tool(
        daemon.data_dir,
        "configure-relay",
        "--provisioning-file",
        str(provisioning),
        "--operator-api-port",
        str(port),
        "--cluster-name",
        "Auth API",
    )
    daemon.start()
    cert = gateway_cert(daemon.data_dir)
    try:
        wait_for_listener(port, cert)
        with httpx.Client(base_url=daemon.url, timeout=30.0) as api:
            yield Gateway(daemon=daemon, operator_port=port, cert=cert, api=api)
    finally:
        daemon.kill()


def _no_store(response: httpx.Response) -> None:
    assert response.headers["cache-control"] == "no-store, max-age=0"
    assert response.headers["pragma"] == "no-cache"


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert {"message", "type", "code"} <= set(error)
    return error


def test_a_legacy_session_pairs_once_and_issues_scoped_credentials(gateway: Gateway) -> None:
    uri = gateway.session()
    package = decode_pairing_uri(uri)
    device = Device(name="  Owner's   phone ")

    challenged = challenge(gateway.api, uri, device)
    assert challenged.status_code == 200, challenged.text
    _no_store(challenged)
    assert set(challenged.json()) == {"challenge", "expiresAt"}  # no attemptId for legacy
    body = proof(uri, device, challenged.json())
    gateway.secrets += [challenged.json()["challenge"], body["signature"]]

    exchanged = gateway.api.post(EXCHANGE, json=body)
    assert exchanged.status_code == 200, exchanged.text
    _no_store(exchanged)
    issued = exchanged.json()
    device.credentials = issued
    gateway.keep(device)
    assert issued["clusterId"] == package.cluster_id
    assert set(issued["scopes"]) == set(PAIRED_SCOPES)
    assert not any(scope.startswith("plugins:") for scope in issued["scopes"])
    assert issued["accessToken"] != issued["refreshToken"]
    remote = issued["remoteAccess"]
    assert remote["transport"] == "paired_websocket_v1"
    assert remote["appCarrierCredential"] == APP_CREDENTIAL
    assert remote["gatewayCaCertificatePem"] == gateway.cert
    assert "gateway-carrier-credential" not in exchanged.text

    # Single use: neither the exchange nor another challenge works again.
    assert _error(gateway.api.post(EXCHANGE, json=body), 409)
    assert _error(challenge(gateway.api, uri, Device()), 409)

    listed = gateway.api.get(DEVICES, headers=device.bearer)
    assert listed.status_code == 200, listed.text
    (row,) = [r for r in listed.json()["devices"] if r["deviceId"] == device.device_id]
    assert row["deviceName"] == "Owner's phone"  # whitespace normalized
    assert row["current"] is True and row["active"] is True


def test_challenge_refusals(gateway: Gateway) -> None:
    uri = gateway.session()
    nonce = decode_pairing_uri(uri).nonce
    good = Device().public_key

    def post(**changes: Any) -> httpx.Response:
        body = {"nonce": nonce, "deviceName": "Phone", "devicePublicKey": good, **changes}
        return gateway.api.post(CHALLENGE, json=body)

    unknown = _error(post(nonce=secrets.token_urlsafe(32)), 404)
    assert "nonce" in unknown["message"]
    for key in (good[:-2], good + "AA", "not base64!", "", good + "="):
        _error(post(devicePublicKey=key), 422)
    for name in ("", "   ", "x" * 81, "a\x07b"):
        _error(post(deviceName=name), 422)
    assert _error(post(nonce=7), 400)["code"] == "invalid_request"
    assert gateway.api.post(CHALLENGE, json={"nonce": nonce}).status_code == 400
    malformed = gateway.api.post(
        CHALLENGE, content=b"{nonce", headers={"Content-Type": "application/json"}
    )
    assert malformed.status_code == 400
    oversized = gateway.api.post(CHALLENGE, json={"nonce": nonce, "deviceName": "x" * 9000})
    _error(oversized, 413)

    # None of those refusals used the session: a good challenge still works, and an
    # 80-character name (after whitespace collapses) is accepted.
    accepted = post(deviceName="  " + "n" * 40 + "   " + "m" * 39 + " ")
    assert accepted.status_code == 200, accepted.text


def test_exchange_refusals(gateway: Gateway) -> None:
    uri = gateway.session()
    device = Device()
    package = decode_pairing_uri(uri)
    early = {"nonce": package.nonce, "signature": device.sign(b"anything")}
    assert "challenged" in _error(gateway.api.post(EXCHANGE, json=early), 409)["message"]

    challenged = challenge(gateway.api, uri, device).json()
    body = proof(uri, device, challenged)
    gateway.secrets += [challenged["challenge"], body["signature"]]
    impostor = proof(uri, Device(), challenged)
    _error(gateway.api.post(EXCHANGE, json=impostor), 401)
    for signature in (body["signature"][:-4], "", "!!", body["signature"] + "AA"):
        _error(gateway.api.post(EXCHANGE, json={**body, "signature": signature}), 401)
    _error(gateway.api.post(EXCHANGE, json={**body, "nonce": secrets.token_urlsafe(32)}), 404)
    _error(gateway.api.post(EXCHANGE, json={"signature": body["signature"]}), 400)

    # The refusals consumed nothing: the real proof still pairs.
    assert gateway.api.post(EXCHANGE, json=body).status_code == 200


def test_concurrent_exchanges_of_one_session_exactly_one_wins(gateway: Gateway) -> None:
    uri = gateway.session()
    device = Device()
    body = proof(uri, device, challenge(gateway.api, uri, device).json())
    gateway.secrets.append(body["signature"])

    def exchange(_: int) -> httpx.Response:
        return httpx.post(f"{gateway.daemon.url}{EXCHANGE}", json=body, timeout=30.0)

    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(exchange, range(8)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * 7, statuses
    for response in responses:
        if response.status_code == 200:
            gateway.secrets += [response.json()["accessToken"], response.json()["refreshToken"]]


def test_an_invitation_pairs_several_devices_then_is_exhausted(gateway: Gateway) -> None:
    code = gateway.invitation(max_pairings=2)
    package = decode_pairing_uri(code)
    assert isinstance(package, InvitationPackage)
    assert code.startswith("skulk://pair?z=")

    first, second = Device(name="one"), Device(name="two")
    challenged = [challenge(gateway.api, code, d) for d in (first, second)]
    assert all(r.status_code == 200 for r in challenged)
    attempts = {r.json()["attemptId"] for r in challenged}
    assert len(attempts) == 2  # independent attempts, not a shared challenge
    for device, response in zip((first, second), challenged, strict=True):
        exchanged = gateway.api.post(EXCHANGE, json=proof(code, device, response.json()))
        assert exchanged.status_code == 200, exchanged.text
        device.credentials = exchanged.json()
        gateway.keep(device)

    listed = gateway.api.get(INVITATIONS, headers=gateway.dashboard())
    assert listed.status_code == 200, listed.text
    _no_store(listed)
    (row,) = [r for r in listed.json()["invitations"] if r["invitationId"] == package.invitation_id]
    assert row["successfulPairings"] == 2 and row["maxPairings"] == 2
    assert row["state"] == "exhausted" and row["totalAttempts"] == 2
    assert package.nonce not in listed.text and "skulk://" not in listed.text

    assert "exhausted" in _error(challenge(gateway.api, code, Device()), 410)["message"]


def test_invitation_exchange_refusals_and_revocation(gateway: Gateway) -> None:
    code = gateway.invitation()
    package = decode_pairing_uri(code)
    assert isinstance(package, InvitationPackage)
    device = Device()
    challenged = challenge(gateway.api, code, device).json()
    body = proof(code, device, challenged)
    gateway.secrets.append(body["signature"])

    # The legacy transcript does not prove an invitation attempt.
    legacy = pairing_signature_message(package.cluster_id, package.nonce, challenged["challenge"])
    _error(gateway.api.post(EXCHANGE, json={**body, "signature": device.sign(legacy)}), 401)
    _error(gateway.api.post(EXCHANGE, json={**body, "attemptId": str(uuid.uuid4())}), 404)
    _error(gateway.api.post(EXCHANGE, json={**body, "invitationId": str(uuid.uuid4())}), 404)
    half = {k: v for k, v in body.items() if k != "attemptId"}
    _error(gateway.api.post(EXCHANGE, json=half), 422)

    # Revocation: 204 (again 204), the open attempt and new ones are gone (410).
    path = f"{INVITATIONS}/{package.invitation_id}"
    for _ in range(2):
        revoked = gateway.api.delete(path, headers=gateway.dashboard())
        assert revoked.status_code == 204, revoked.text
    assert "revoked" in _error(gateway.api.post(EXCHANGE, json=body), 410)["message"]
    _error(challenge(gateway.api, code, Device()), 410)
    _error(gateway.api.delete(f"{INVITATIONS}/{uuid.uuid4()}", headers=gateway.dashboard()), 404)


def test_the_eleventh_live_attempt_is_429_with_retry_after(gateway: Gateway) -> None:
    code = gateway.invitation()
    for _ in range(10):
        response = challenge(gateway.api, code, Device())
        assert response.status_code == 200, response.text
    refused = challenge(gateway.api, code, Device())
    assert _error(refused, 429)["type"] == "rate_limit_error"
    assert 1 <= int(refused.headers["retry-after"]) <= 300


def test_dashboard_invitation_bounds(gateway: Gateway) -> None:
    def create(**body: Any) -> httpx.Response:
        return gateway.api.post(INVITATIONS, json=body, headers=gateway.dashboard())

    for valid_for, pairings in ((59, 10), (7_776_001, 10), (3600, 0), (3600, 21)):
        _error(create(validForSeconds=valid_for, maxPairings=pairings), 422)
    _error(create(validForSeconds=3600), 400)
    _error(create(validForSeconds="1h", maxPairings=2), 400)
    for valid_for, pairings in ((60, 20), (7_776_000, 1)):
        created = create(validForSeconds=valid_for, maxPairings=pairings)
        assert created.status_code == 201, created.text
        _no_store(created)
        gateway.secrets.append(created.json()["pairingCode"])
        assert created.json()["invitation"]["maxPairings"] == pairings


@pytest.mark.parametrize(
    ("change", "code", "hint"),
    [
        ({"X-Forwarded-For": "203.0.113.9"}, "forwarded_request", "x-forwarded-for"),
        ({"Forwarded": "for=203.0.113.9"}, "forwarded_request", "forwarded"),
        ({"X-Real-IP": "203.0.113.9"}, "forwarded_request", "x-real-ip"),
        ({"X-Forwarded-Proto": "https"}, "forwarded_request", "x-forwarded-proto"),
        ({"Origin": "http://evil.example"}, "cross_origin", "origin"),
        ({"Origin": "null"}, "cross_origin", "origin"),
        ({"Referer": "http://evil.example/pairing"}, "cross_origin", "referer"),
        # A Host naming no name of this node is refused for every route, first (DNS
        # rebinding), with 421 rather than the direct-owner guard's own 403.
        ({"Host": "evil.example"}, "misdirected_host", "host"),
        ({"X-Skulk-Dashboard": None}, "dashboard_header_required", "x-skulk-dashboard"),
        ({"X-Skulk-Dashboard": "pairing-v2"}, "dashboard_header_required", "x-skulk-dashboard"),
    ],
)
def test_direct_owner_refusals_say_what_to_change(
    gateway: Gateway, change: dict[str, str | None], code: str, hint: str
) -> None:
    admitted = {**gateway.dashboard(), "Referer": f"{gateway.daemon.url}/settings/devices"}
    # The unchanged dashboard request is admitted: each refusal below is the one change.
    assert gateway.api.get(INVITATIONS, headers=admitted).status_code == 200
    assert gateway.api.get(DEVICES, headers=admitted).status_code == 200
    headers = dict(admitted)
    for name, value in change.items():
        headers.pop(name, None)
        if value is not None:
            headers[name] = value
    before = len(gateway.api.get(INVITATIONS, headers=admitted).json()["invitations"])
    requests = [
        gateway.api.build_request(
            "POST", INVITATIONS, json={"validForSeconds": 60, "maxPairings": 1}, headers=headers
        ),
        gateway.api.build_request("GET", INVITATIONS, headers=headers),
        gateway.api.build_request("DELETE", f"{INVITATIONS}/{uuid.uuid4()}", headers=headers),
        gateway.api.build_request("GET", DEVICES, headers=headers),
        gateway.api.build_request("DELETE", f"{DEVICES}/{uuid.uuid4()}", headers=headers),
    ]
    status = 421 if code == "misdirected_host" else 403
    for request in requests:
        error = _error(gateway.api.send(request), status)
        assert error["code"] == code
        assert hint in error["message"].lower()
    after = len(gateway.api.get(INVITATIONS, headers=admitted).json()["invitations"])
    assert after == before  # the refused POST created nothing


def test_devices_by_bearer_and_by_the_dashboard(gateway: Gateway) -> None:
    first, second = gateway.pair(name="first"), gateway.pair(name="second")

    listed = gateway.api.get(DEVICES, headers=first.bearer)
    assert listed.status_code == 200, listed.text
    _no_store(listed)
    rows = {r["deviceId"]: r for r in listed.json()["devices"]}
    assert rows[first.device_id]["current"] is True
    assert rows[second.device_id]["current"] is False
    for secret in (first.public_key, second.public_key, first.credentials["refreshToken"]):
        assert secret not in listed.text
    direct = gateway.api.get(DEVICES, headers=gateway.dashboard()).json()["devices"]
    assert not any(row["current"] for row in direct)  # the dashboard is no device

    # A supplied bearer is judged alone: never a fallback to the dashboard's authority.
    for authorization in (
        "Bearer " + secrets.token_urlsafe(32),
        "Bearer",
        "Basic dXNlcjpwYXNz",
        f"Bearer {first.credentials['accessToken']} extra",
    ):
        refused = gateway.api.get(
            DEVICES, headers={**gateway.dashboard(), "Authorization": authorization}
        )
        assert _error(refused, 401)["type"] == "authentication_error"
        assert refused.headers["www-authenticate"] == "Bearer"

    _error(gateway.api.delete(f"{DEVICES}/{uuid.uuid4()}", headers=first.bearer), 404)
    for _ in range(2):
        revoked = gateway.api.delete(f"{DEVICES}/{second.device_id}", headers=first.bearer)
        assert revoked.status_code == 204, revoked.text
    _error(gateway.api.get(DEVICES, headers=second.bearer), 401)
    refresh = {"deviceId": second.device_id, "refreshToken": second.credentials["refreshToken"]}
    _error(gateway.api.post(TOKEN, json=refresh), 401)
    after = {
        r["deviceId"]: r for r in gateway.api.get(DEVICES, headers=first.bearer).json()["devices"]
    }
    assert after[second.device_id]["active"] is False

    # A device without devices:manage is refused (403), and keeps its pairing.
    set_scopes(gateway.data_dir, first.device_id, [CLUSTER_READ])
    assert (
        "devices:manage" in _error(gateway.api.get(DEVICES, headers=first.bearer), 403)["message"]
    )
    _error(gateway.api.delete(f"{DEVICES}/{second.device_id}", headers=first.bearer), 403)

    # The dashboard revokes too.
    revoked = gateway.api.delete(f"{DEVICES}/{first.device_id}", headers=gateway.dashboard())
    assert revoked.status_code == 204
    _error(gateway.api.get(DEVICES, headers=first.bearer), 401)


def test_refresh_rotates_both_tokens_and_rejects_replay(gateway: Gateway) -> None:
    device = gateway.pair()
    old = dict(device.credentials)
    body = {"deviceId": device.device_id, "refreshToken": old["refreshToken"]}

    rotated = gateway.api.post(TOKEN, json=body)
    assert rotated.status_code == 200, rotated.text
    _no_store(rotated)
    fresh = rotated.json()
    gateway.secrets += [fresh["accessToken"], fresh["refreshToken"]]
    assert fresh["accessToken"] != old["accessToken"]
    assert fresh["refreshToken"] != old["refreshToken"]
    assert sorted(fresh["scopes"]) == sorted(old["scopes"])
    assert "remoteAccess" not in fresh  # relay material is not repeated

    _error(gateway.api.post(TOKEN, json=body), 401)  # a replayed refresh token
    with gateway.listener() as listener:
        _error(
            listener.get("/state", headers={"Authorization": f"Bearer {old['accessToken']}"}), 401
        )
        assert (
            listener.get(
                "/state", headers={"Authorization": f"Bearer {fresh['accessToken']}"}
            ).status_code
            == 200
        )
    _error(gateway.api.post(TOKEN, json={**body, "deviceId": str(uuid.uuid4())}), 401)
    _error(gateway.api.post(TOKEN, json={"deviceId": device.device_id}), 400)

    # Concurrent rotations of one refresh token: exactly one wins.
    body = {"deviceId": device.device_id, "refreshToken": fresh["refreshToken"]}

    def rotate(_: int) -> httpx.Response:
        return httpx.post(f"{gateway.daemon.url}{TOKEN}", json=body, timeout=30.0)

    with ThreadPoolExecutor(max_workers=6) as pool:
        responses = list(pool.map(rotate, range(6)))
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == 1 and set(statuses) <= {200, 401, 409}, statuses
    for response in responses:
        if response.status_code == 200:
            gateway.secrets += [response.json()["accessToken"], response.json()["refreshToken"]]


def test_expired_sessions_attempts_and_access_tokens(gateway: Gateway) -> None:
    an_hour_ago = past_service(gateway.data_dir, 3600)
    exchange_url = f"https://127.0.0.1:{gateway.operator_port}"

    expired = an_hour_ago.create_session(exchange_url).uri
    gateway.secrets.append(decode_pairing_uri(expired).nonce)
    assert "expired" in _error(challenge(gateway.api, expired, Device()), 410)["message"]

    invitation = an_hour_ago.create_invitation(86_400, 5, exchange_url).uri
    package = decode_pairing_uri(invitation)
    assert isinstance(package, InvitationPackage)
    gateway.secrets.append(package.nonce)
    device = Device()
    attempt = an_hour_ago.challenge(
        package.nonce, "late phone", device.public_key, package.invitation_id
    )
    body = proof(
        invitation, device, {"challenge": attempt.challenge, "attemptId": attempt.attempt_id}
    )
    _error(gateway.api.post(EXCHANGE, json=body), 410)
    # The invitation itself is still valid: a new attempt opens.
    assert challenge(gateway.api, invitation, Device()).status_code == 200

    # Paired an hour ago: the access token expired, the refresh token still rotates.
    paired = pair_in_process(an_hour_ago, an_hour_ago.create_session(exchange_url).uri, Device())
    gateway.keep(paired)
    with gateway.listener() as listener:
        _error(listener.get("/state", headers=paired.bearer), 401)
        refresh = {"deviceId": paired.device_id, "refreshToken": paired.credentials["refreshToken"]}
        rotated = gateway.api.post(TOKEN, json=refresh)
        assert rotated.status_code == 200, rotated.text
        paired.credentials.update(rotated.json())
        gateway.keep(paired)
        assert listener.get("/state", headers=paired.bearer).status_code == 200


def test_an_over_budget_invitation_is_refused_before_persisting(gateway: Gateway) -> None:
    count = len(gateway.api.get(INVITATIONS, headers=gateway.dashboard()).json()["invitations"])
    huge = relay_provisioning(
        gateway.daemon.root / "huge.json", credential=secrets.token_urlsafe(700)
    )
    host_tool(
        gateway.data_dir,
        "configure-relay",
        "--provisioning-file",
        str(huge),
        "--operator-api-port",
        str(gateway.operator_port),
        "--cluster-name",
        "Auth API",
        "--replace",
    )
    refused = gateway.api.post(
        INVITATIONS, json={"validForSeconds": 600, "maxPairings": 2}, headers=gateway.dashboard()
    )
    assert "budget" in _error(refused, 422)["message"]
    after = gateway.api.get(INVITATIONS, headers=gateway.dashboard()).json()["invitations"]
    assert len(after) == count


def test_no_secret_reaches_the_log(gateway: Gateway) -> None:
    log = gateway.daemon.log_text()
    assert "paired operator device" in log  # the log is the daemon's, and it saw pairings
    assert len(gateway.secrets) > 20
    leaked = [secret for secret in gateway.secrets if secret in log]
    assert leaked == []
