"""Secrets (nonces, challenges, tokens, signatures, carrier credentials, keys) stay secret."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from skulk_core.operator.package import InvitationPackage, decode_pairing_uri
from skulk_core.operator.relay import parse_provisioning
from skulk_daemon.operator.errors import AuthorityError
from tests.daemon.authority_support import (
    APP_CREDENTIAL,
    CONNECTOR_KEY_B64,
    GATEWAY_CREDENTIAL,
    Device,
    make_service,
    provisioning_v2,
)


def test_no_secret_reaches_a_log_record_an_error_or_a_repr(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    service, clock = make_service(tmp_path)
    provisioning = parse_provisioning(provisioning_v2())
    service.configure_relay(provisioning, 52417, "Cluster")
    secrets: list[str] = [APP_CREDENTIAL, GATEWAY_CREDENTIAL, CONNECTOR_KEY_B64]
    shown: list[str] = [repr(provisioning)]
    errors: list[str] = []

    def refused(call: object) -> None:
        try:
            call()  # type: ignore[operator]
        except AuthorityError as exc:
            errors.append(str(exc))
            errors.append(repr(exc))
        else:
            raise AssertionError("expected a refusal")

    issue = service.create_session()
    package = decode_pairing_uri(issue.uri)
    device = Device()
    challenge = service.challenge(package.nonce, "phone", device.public_key)
    signature = device.sign_legacy(package.cluster_id, package.nonce, challenge.challenge)
    refused(lambda: service.challenge(package.nonce, "phone", device.public_key))
    refused(lambda: service.exchange(package.nonce, signature[:-4] + "AAAA"))
    result = service.exchange(package.nonce, signature)
    refused(lambda: service.exchange(package.nonce, signature))
    grant = service.refresh(result.device_id, result.refresh_token)
    refused(lambda: service.refresh(result.device_id, result.refresh_token))
    refused(lambda: service.authenticate(result.access_token))

    invitation_issue = service.create_invitation(600, 1)
    invitation = decode_pairing_uri(invitation_issue.uri)
    assert isinstance(invitation, InvitationPackage)
    attempt = service.challenge(
        invitation.nonce, "tab", device.public_key, invitation.invitation_id
    )
    refused(lambda: service.challenge(invitation.nonce, "tab", "bad-key", invitation.invitation_id))
    clock.advance(301)
    refused(
        lambda: service.exchange(
            invitation.nonce, signature, invitation.invitation_id, attempt.attempt_id
        )
    )
    service.revoke_device(result.device_id)

    secrets += [
        package.nonce,
        challenge.challenge,
        signature,
        result.access_token,
        result.refresh_token,
        grant.access_token,
        grant.refresh_token,
        invitation.nonce,
        attempt.challenge,
        issue.uri,
        invitation_issue.uri,
        service.gateway_identity().cert_path.with_name("gateway-tls.key").read_text(),
    ]
    shown += [
        repr(x)
        for x in (
            issue,
            invitation_issue,
            package,
            invitation,
            challenge,
            result,
            grant,
            attempt,
            result.remote_access,
        )
    ]
    logged = [record.getMessage() for record in caplog.records]
    assert logged, "the service should log its transitions"
    assert len(errors) == 14
    for secret in secrets:
        for text in (*logged, *errors, *shown):
            assert secret not in text


def test_the_private_key_never_appears_in_the_identity_repr(tmp_path: Path) -> None:
    service, _ = make_service(tmp_path)
    identity = service.gateway_identity()
    assert "PRIVATE KEY" not in repr(identity)
    assert "PRIVATE KEY" in identity.key_path.read_text()
