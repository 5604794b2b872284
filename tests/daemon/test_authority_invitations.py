"""Version-three invitations: attempts, limits, revocation and their exact refusals."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from skulk_core.operator.package import InvitationPackage, decode_pairing_uri
from skulk_daemon.operator.clock import ManualClock
from skulk_daemon.operator.errors import (
    Conflict,
    Expired,
    Invalid,
    TooManyAttempts,
    Unauthorized,
    Unknown,
)
from skulk_daemon.operator.results import ChallengeResult, ExchangeResult
from skulk_daemon.operator.service import OperatorPairingService
from tests.daemon.authority_support import Device, make_service


def invite(
    service: OperatorPairingService, valid_for: int = 3600, max_pairings: int = 10
) -> InvitationPackage:
    package = decode_pairing_uri(service.create_invitation(valid_for, max_pairings).uri)
    assert isinstance(package, InvitationPackage)
    return package


def attempt(
    service: OperatorPairingService, package: InvitationPackage, device: Device | None = None
) -> tuple[Device, ChallengeResult]:
    device = device or Device()
    result = service.challenge(package.nonce, "tablet", device.public_key, package.invitation_id)
    return device, result


def finish(
    service: OperatorPairingService,
    package: InvitationPackage,
    device: Device,
    challenge: ChallengeResult,
) -> ExchangeResult:
    assert challenge.attempt_id is not None
    signature = device.sign_invitation(
        package.cluster_id,
        package.invitation_id,
        package.nonce,
        challenge.attempt_id,
        challenge.challenge,
    )
    return service.exchange(package.nonce, signature, package.invitation_id, challenge.attempt_id)


def test_an_invitation_pairs_several_devices(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    issue = service.create_invitation(7200, 3)
    package = decode_pairing_uri(issue.uri)
    assert isinstance(package, InvitationPackage)
    assert issue.invitation is not None
    assert package.invitation_id == issue.invitation.invitation_id
    assert package.max_pairings == 3
    assert package.issued_at == int(clock.now)
    assert package.expires_at == int(clock.now) + 7200

    first, second = attempt(service, package), attempt(service, package)
    assert first[1].attempt_id != second[1].attempt_id
    assert first[1].challenge != second[1].challenge
    assert set(json.loads(msgspec.json.encode(first[1]))) == {"challenge", "expiresAt", "attemptId"}
    devices = {
        finish(service, package, *second).device_id,
        finish(service, package, *first).device_id,
    }
    assert len(devices) == 2
    [status] = service.list_invitations()
    assert (status.successful_pairings, status.total_attempts, status.active_attempts) == (2, 2, 0)
    assert status.state == "active"


def test_the_legacy_transcript_does_not_prove_an_invitation(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    package = invite(service)
    device, challenge = attempt(service, package)
    assert challenge.attempt_id is not None
    legacy = device.sign_legacy(package.cluster_id, package.nonce, challenge.challenge)
    with pytest.raises(Unauthorized):
        service.exchange(package.nonce, legacy, package.invitation_id, challenge.attempt_id)
    # Another attempt's identifiers in the transcript fail too.
    _, other = attempt(service, package)
    assert other.attempt_id is not None
    crossed = device.sign_invitation(
        package.cluster_id,
        package.invitation_id,
        package.nonce,
        other.attempt_id,
        challenge.challenge,
    )
    with pytest.raises(Unauthorized):
        service.exchange(package.nonce, crossed, package.invitation_id, challenge.attempt_id)
    assert service.list_invitations()[0].successful_pairings == 0
    finish(service, package, device, challenge)
    assert service.list_invitations()[0].successful_pairings == 1


def test_eleventh_live_attempt_is_429_until_the_oldest_expires(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    package = invite(service)
    for _ in range(10):
        attempt(service, package)
        clock.advance(10)  # attempts at t0, t0+10, ..., t0+90; now t0+100
    with pytest.raises(TooManyAttempts) as excinfo:
        attempt(service, package)
    assert excinfo.value.status == 429
    assert excinfo.value.retry_after == 200  # the oldest expires at t0+300
    clock.advance(199)
    with pytest.raises(TooManyAttempts) as excinfo:
        attempt(service, package)
    assert excinfo.value.retry_after == 1
    clock.advance(1)
    attempt(service, package)
    assert service.list_invitations()[0].active_attempts == 10


def test_the_hundred_and_first_attempt_is_410_but_issued_ones_finish(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    package = invite(service, valid_for=86400, max_pairings=20)
    last: tuple[Device, ChallengeResult] | None = None
    for index in range(100):
        if index and index % 10 == 0:
            clock.advance(300)  # let the previous ten expire
        last = attempt(service, package)
    with pytest.raises(Expired):
        attempt(service, package)
    assert last is not None
    assert finish(service, package, *last).device_id
    [status] = service.list_invitations()
    assert status.total_attempts == 100 and status.successful_pairings == 1


def test_an_exhausted_invitation_is_410_even_for_live_attempts(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    package = invite(service, max_pairings=1)
    first, second = attempt(service, package), attempt(service, package)
    finish(service, package, *first)
    with pytest.raises(Expired):
        finish(service, package, *second)
    with pytest.raises(Expired):
        attempt(service, package)
    assert service.list_invitations()[0].state == "exhausted"


def test_attempts_are_single_use_and_expire_in_five_minutes(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    package = invite(service)
    device, challenge = attempt(service, package)
    finish(service, package, device, challenge)
    with pytest.raises(Conflict):
        finish(service, package, device, challenge)
    late = attempt(service, package)
    clock.advance(300)
    with pytest.raises(Expired):
        finish(service, package, *late)


def test_an_attempt_never_outlives_its_invitation(tmp_path: Path) -> None:
    service, clock = make_service(tmp_path)
    package = invite(service, valid_for=120)
    clock.advance(60)
    device, challenge = attempt(service, package)
    assert challenge.expires_at == service.list_invitations()[0].expires_at
    clock.advance(60)
    with pytest.raises(Expired):
        finish(service, package, device, challenge)
    with pytest.raises(Expired):
        attempt(service, package)
    assert service.list_invitations()[0].state == "expired"


def test_revocation_blocks_attempts_but_keeps_paired_devices(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    package = invite(service)
    paired = finish(service, package, *attempt(service, package))
    unfinished = attempt(service, package)
    service.revoke_invitation(package.invitation_id)
    service.revoke_invitation(package.invitation_id)  # idempotent
    with pytest.raises(Expired):
        attempt(service, package)
    with pytest.raises(Expired):
        finish(service, package, *unfinished)
    [status] = service.list_invitations()
    assert status.state == "revoked" and status.active_attempts == 0
    assert service.authenticate(paired.access_token).device_id == paired.device_id
    with pytest.raises(Unknown):
        service.revoke_invitation("00000000-0000-4000-8000-000000000000")


def test_unknown_invitations_attempts_and_nonces_are_404(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    package, other = invite(service), invite(service)
    device = Device()
    with pytest.raises(Unknown):
        service.challenge(
            package.nonce, "d", device.public_key, "00000000-0000-4000-8000-000000000000"
        )
    with pytest.raises(Unknown):  # another invitation's nonce
        service.challenge(other.nonce, "d", device.public_key, package.invitation_id)
    with pytest.raises(Unknown):  # an invitation nonce used as a legacy session
        service.challenge(package.nonce, "d", device.public_key)
    device, challenge = attempt(service, package)
    with pytest.raises(Unknown):
        service.exchange(
            package.nonce, "A" * 86, package.invitation_id, "00000000-0000-4000-8000-000000000000"
        )
    assert challenge.attempt_id is not None
    with pytest.raises(Unknown):  # the attempt belongs to the other invitation
        service.exchange(other.nonce, "A" * 86, other.invitation_id, challenge.attempt_id)
    with pytest.raises(Invalid):
        service.exchange(package.nonce, "A" * 86, package.invitation_id, None)


@pytest.mark.parametrize(
    ("valid_for", "max_pairings", "ok"),
    [
        (60, 1, True),
        (7_776_000, 20, True),
        (59, 10, False),
        (7_776_001, 10, False),
        (600, 0, False),
        (600, 21, False),
    ],
)
def test_invitation_bounds(tmp_path: Path, valid_for: int, max_pairings: int, ok: bool) -> None:
    service, _ = make_service(tmp_path)
    if ok:
        assert service.create_invitation(valid_for, max_pairings).invitation is not None
    else:
        with pytest.raises(Invalid):
            service.create_invitation(valid_for, max_pairings)
        assert service.list_invitations() == []


def test_listing_never_reveals_the_nonce_or_package(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    issue = service.create_invitation(600, 2)
    package = decode_pairing_uri(issue.uri)
    listed = msgspec.json.encode(service.list_invitations()).decode()
    assert package.nonce not in listed and issue.uri not in listed
    assert set(json.loads(listed)[0]) == {
        "invitationId",
        "createdAt",
        "expiresAt",
        "successfulPairings",
        "maxPairings",
        "activeAttempts",
        "totalAttempts",
        "state",
    }
    assert package.nonce not in repr(issue)


def test_clock_is_injected_not_read(tmp_path: Path) -> None:
    clock = ManualClock(2_000_000_000)
    service, _ = make_service(tmp_path, clock)
    assert service.create_invitation(60, 1).expires_at == "2033-05-18T03:34:20Z"
