"""Access and refresh tokens: lifetimes, rotation, replay, revocation and the device list."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from skulk_daemon.operator.errors import Unauthorized, Unknown
from tests.daemon.authority_support import make_service, pair_legacy


def test_access_lasts_fifteen_minutes(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    result = pair_legacy(service)
    clock.advance(899)
    assert service.authenticate(result.access_token).device_id == result.device_id
    clock.advance(1)
    with pytest.raises(Unauthorized):
        service.authenticate(result.access_token)
    # The refresh token still rotates a new pair.
    assert service.refresh(result.device_id, result.refresh_token).access_token


def test_refresh_lasts_thirty_days(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    result = pair_legacy(service)
    clock.advance(30 * 86400)
    with pytest.raises(Unauthorized):
        service.refresh(result.device_id, result.refresh_token)


def test_rotation_kills_both_old_tokens_and_a_replay_revokes_nothing_else(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    first = pair_legacy(service)
    clock.advance(60)
    second = service.refresh(first.device_id, first.refresh_token)
    assert set(json.loads(msgspec.json.encode(second))) == {
        "accessToken",
        "accessTokenExpiresAt",
        "refreshToken",
        "refreshTokenExpiresAt",
        "scopes",
    }
    assert second.scopes == first.scopes
    assert second.access_token != first.access_token
    assert second.refresh_token != first.refresh_token
    with pytest.raises(Unauthorized):
        service.authenticate(first.access_token)
    with pytest.raises(Unauthorized):  # the replay
        service.refresh(first.device_id, first.refresh_token)
    # The replay did not take the device down: the current pair still works.
    assert service.authenticate(second.access_token).device_id == first.device_id
    third = service.refresh(first.device_id, second.refresh_token)
    assert service.authenticate(third.access_token).device_id == first.device_id


def test_refresh_needs_the_matching_device(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    a, b = pair_legacy(service, "a"), pair_legacy(service, "b")
    for device_id, token in (
        (b.device_id, a.refresh_token),
        ("00000000-0000-4000-8000-000000000000", a.refresh_token),
        (a.device_id, a.access_token),  # an access token is not a refresh token
        (a.device_id, "x"),
    ):
        with pytest.raises(Unauthorized):
            service.refresh(device_id, token)
    with pytest.raises(Unauthorized):
        service.authenticate(a.refresh_token)  # nor the other way round
    assert service.refresh(a.device_id, a.refresh_token)


def test_revocation_is_immediate_idempotent_and_404_when_unknown(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    keep, revoke = pair_legacy(service, "keep"), pair_legacy(service, "revoke")
    clock.advance(5)
    service.revoke_device(revoke.device_id)
    with pytest.raises(Unauthorized):
        service.authenticate(revoke.access_token)
    with pytest.raises(Unauthorized):
        service.refresh(revoke.device_id, revoke.refresh_token)
    service.revoke_device(revoke.device_id)
    with pytest.raises(Unknown):
        service.revoke_device("00000000-0000-4000-8000-000000000000")
    assert service.authenticate(keep.access_token).device_id == keep.device_id

    rows = {row.device_id: row for row in service.list_devices(keep.device_id)}
    assert rows[keep.device_id].active and rows[keep.device_id].current
    assert rows[keep.device_id].refresh_token_expires_at is not None
    gone = rows[revoke.device_id]
    assert not gone.active and not gone.current
    assert gone.revoked_at is not None and gone.refresh_token_expires_at is None


def test_the_device_list_exposes_no_keys_digests_or_credentials(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    result = pair_legacy(service, "listed")
    body = msgspec.json.encode(service.list_devices()).decode()
    assert result.access_token not in body and result.refresh_token not in body
    assert set(json.loads(body)[0]) == {
        "deviceId",
        "deviceName",
        "pairedAt",
        "refreshTokenExpiresAt",
        "active",
        "revokedAt",
        "current",
    }
    assert not any(row.current for row in service.list_devices())  # direct callers: no row


@pytest.mark.parametrize("token", ["", "A" * 43, "A" * 44, "not a token at all", "\u00e9" * 43])
def test_garbage_bearers_are_401(tmp_path: Path, token: str) -> None:
    service, _ = make_service(tmp_path)
    pair_legacy(service)
    with pytest.raises(Unauthorized):
        service.authenticate(token)


def test_a_second_process_sees_a_revocation_at_once(tmp_path: Path) -> None:
    daemon_side, _ = make_service(tmp_path)
    result = pair_legacy(daemon_side)
    assert daemon_side.authenticate(result.access_token)  # warms the reader's cache
    host_side, _ = make_service(tmp_path)
    host_side.revoke_device(result.device_id)
    with pytest.raises(Unauthorized):
        daemon_side.authenticate(result.access_token)
