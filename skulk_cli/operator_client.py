"""The reference operator client: pair this CLI with a gateway, then call it as that device.

Pairing (:func:`pair_device`) follows the spec's flow: decode the package, fetch the
gateway's TLS certificate and check its public key against the package's fingerprint
*before* the nonce leaves this machine, generate an Ed25519 device key, ask for a
challenge, sign the shared transcript (v1 for legacy packages, v2 with the invitation
and attempt ids for invitations), exchange, check the cluster id, and store the
credentials owner-only.

Afterwards (:func:`operator_client`) every request goes to the gateway's operator
listener over TLS that trusts exactly the pinned certificate, with
``Authorization: Bearer``; :class:`OperatorAuth` rotates the token pair shortly before
the access token expires. A refusal to rotate means pairing again, never a fallback to
direct access.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Generator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

import httpx
import msgspec

from skulk_cli.client import JsonObject, SkulkClient, SkulkUnreachable, api_error
from skulk_cli.operator_credentials import (
    CredentialStore,
    CredentialsUnusable,
    StoredPairing,
    utc_now,
)
from skulk_cli.operator_views import ChallengeReply, ExchangeReply, TokenReply

if TYPE_CHECKING:
    from skulk_core.operator.package import PairingPackage

# Rotate this long before the access token expires, so a request sent just before the
# deadline (or a slightly slow clock here) does not reach the gateway with a dead token.
REFRESH_MARGIN_SECONDS = 60.0
CERTIFICATE_FETCH_TIMEOUT_SECONDS = 10.0
TOKEN_PATH = "/v1/auth/token"

T = TypeVar("T")


class PairingRefused(Exception):
    """``connect`` cannot (or must not) pair with this package; the message is safe."""


def certificate_fingerprint(certificate_pem: str) -> str:
    """The skulk_core fingerprint of a PEM certificate's public key (SPKI)."""
    from cryptography import x509  # noqa: PLC0415 - only pairing needs cryptography
    from cryptography.hazmat.primitives.serialization import (  # noqa: PLC0415
        Encoding,
        PublicFormat,
    )

    from skulk_core.operator.encoding import public_key_fingerprint  # noqa: PLC0415

    certificate = x509.load_pem_x509_certificate(certificate_pem.encode("ascii"))
    spki = certificate.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return public_key_fingerprint(spki)


def fetch_certificate(origin: str) -> str:
    """The certificate the TLS server at ``origin`` presents (PEM), *not* verified.

    Only for comparing against a fingerprint the caller already trusts.
    """
    parts = urlsplit(origin)
    host = parts.hostname or ""
    port = parts.port or 443
    try:
        return ssl.get_server_certificate((host, port), timeout=CERTIFICATE_FETCH_TIMEOUT_SECONDS)
    except (OSError, ssl.SSLError) as exc:
        raise SkulkUnreachable(origin, str(exc) or type(exc).__name__) from None


def pinned_context(certificate_pem: str) -> ssl.SSLContext:
    """A client TLS context that trusts exactly ``certificate_pem`` and nothing else.

    NOTE: the gateway's certificate is self-signed and pinned, so it is the only trust
    anchor (``VERIFY_X509_PARTIAL_CHAIN`` lets the leaf itself be the anchor even
    without CA constraints). Host-name checking is off because the pin replaces it:
    the operator listener is reached by loopback address, LAN address or a tunnel,
    none of which the certificate can name in advance, and only the holder of the
    pinned key can complete the handshake.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    context.load_verify_locations(cadata=certificate_pem)
    return context


def _is_tls(origin: str) -> bool:
    return urlsplit(origin).scheme == "https"


def decode_payload(payload: str) -> PairingPackage:
    """The package in a ``skulk://pair?...`` payload; :class:`PairingRefused` if invalid."""
    from skulk_core.operator.package import InvalidPackage, decode_pairing_uri  # noqa: PLC0415

    try:
        return decode_pairing_uri(payload.strip())
    except InvalidPackage as exc:
        raise PairingRefused(f"not a usable pairing payload: {exc}") from None


def pair_device(
    payload: str,
    device_name: str,
    store: CredentialStore,
    *,
    clock: Callable[[], float] = time.time,
) -> StoredPairing:
    """Pair with the gateway named in ``payload`` and store the result in ``store``.

    Raises :class:`PairingRefused` (bad or expired package, certificate or cluster
    mismatch), :class:`~skulk_cli.client.SkulkApiError` (the gateway refused: the
    spec's 404/409/410/422/429/401 answers) or :class:`SkulkUnreachable`.
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (  # noqa: PLC0415
        Ed25519PrivateKey,
    )

    from skulk_core.operator.encoding import b64url_encode  # noqa: PLC0415
    from skulk_core.operator.package import InvitationPackage  # noqa: PLC0415
    from skulk_core.operator.transcripts import (  # noqa: PLC0415
        pairing_invitation_signature_message,
        pairing_signature_message,
    )

    package = decode_payload(payload)
    if package.expires_at <= clock():
        raise PairingRefused(
            "this pairing package has expired; run `skulk operator pair` on the gateway "
            "for a new one"
        )
    origin = package.exchange_url.rstrip("/")
    certificate_pem: str | None = None
    verify: ssl.SSLContext | bool = True
    if _is_tls(origin):
        # NOTE: checked before the challenge, because the challenge carries the nonce:
        # a server that cannot prove it holds the pinned key never sees it.
        certificate_pem = fetch_certificate(origin)
        if certificate_fingerprint(certificate_pem) != package.fingerprint:
            raise PairingRefused(
                f"the server at {origin} presented a TLS key whose fingerprint is not "
                f"the package's {package.fingerprint}; nothing was sent to it"
            )
        verify = pinned_context(certificate_pem)
    # (A cleartext exchange URL is loopback-only; the package decoder refuses others.)

    invitation = package if isinstance(package, InvitationPackage) else None
    key = Ed25519PrivateKey.generate()
    challenge_body: JsonObject = {
        "nonce": package.nonce,
        "deviceName": device_name,
        "devicePublicKey": b64url_encode(key.public_key().public_bytes_raw()),
    }
    if invitation is not None:
        challenge_body["invitationId"] = invitation.invitation_id
    with SkulkClient(origin, verify=verify) as client:
        challenge = _parse(client.pairing_challenge(challenge_body), ChallengeReply, "challenge")
        exchange_body: JsonObject = {"nonce": package.nonce}
        if invitation is not None:
            if not challenge.attempt_id:
                raise PairingRefused("the gateway's challenge for an invitation has no attemptId")
            message = pairing_invitation_signature_message(
                package.cluster_id,
                invitation.invitation_id,
                package.nonce,
                challenge.attempt_id,
                challenge.challenge,
            )
            exchange_body["invitationId"] = invitation.invitation_id
            exchange_body["attemptId"] = challenge.attempt_id
        else:
            message = pairing_signature_message(
                package.cluster_id, package.nonce, challenge.challenge
            )
        exchange_body["signature"] = b64url_encode(key.sign(message))
        grant = _parse(client.pairing_exchange(exchange_body), ExchangeReply, "exchange")

    if grant.cluster_id != package.cluster_id:
        raise PairingRefused(
            f"the gateway answered for cluster {grant.cluster_id}, but the package names "
            f"{package.cluster_id}; its credentials were not stored"
        )
    relay_pem = grant.remote_access.gateway_ca_certificate_pem if grant.remote_access else None
    if relay_pem and certificate_fingerprint(relay_pem) != package.fingerprint:
        raise PairingRefused(
            "the gateway's relay certificate does not match the package's fingerprint; "
            "its credentials were not stored"
        )
    pairing = StoredPairing(
        cluster_id=grant.cluster_id,
        cluster_name=package.cluster_name,
        operator_url=origin,
        fingerprint=package.fingerprint,
        device_id=grant.device_id,
        device_name=device_name,
        scopes=grant.scopes,
        paired_at=utc_now(),
        access_token=grant.access_token,
        access_expires_at=grant.access_token_expires_at,
        refresh_token=grant.refresh_token,
        refresh_expires_at=grant.refresh_token_expires_at,
    )
    store.save(pairing, certificate_pem)
    return pairing


class OperatorAuth(httpx.Auth):
    """``Authorization: Bearer`` from the stored pairing, rotated before it expires.

    The rotation is sent through the same pinned client. Both new tokens replace the
    old pair in one atomic write; a refused rotation raises
    :class:`CredentialsUnusable` (pair again) and the request is never sent without a
    bearer.
    """

    def __init__(
        self,
        store: CredentialStore,
        pairing: StoredPairing,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._pairing = pairing
        self._clock = clock

    def _expiring(self, pairing: StoredPairing) -> bool:
        deadline = pairing.access_expires_at.timestamp() - REFRESH_MARGIN_SECONDS
        return self._clock() >= deadline

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self._expiring(self._pairing):
            yield from self._rotate()
        request.headers["Authorization"] = f"Bearer {self._pairing.access_token}"
        yield request

    def _rotate(self) -> Generator[httpx.Request, httpx.Response, None]:
        # NOTE: httpx closes this generator when the send fails, which leaves the
        # `with` block and releases the lock.
        with self._store.locked():
            latest = self._store.load()
            if latest.device_id != self._pairing.device_id:
                raise CredentialsUnusable("the stored pairing changed while this command ran")
            if not self._expiring(latest):
                self._pairing = latest  # another skulk process rotated meanwhile
                return
            if latest.refresh_expires_at.timestamp() <= self._clock():
                expired = _when(latest.refresh_expires_at)
                raise CredentialsUnusable(f"this device's refresh credential expired at {expired}")
            response = yield httpx.Request(
                "POST",
                f"{latest.operator_url}{TOKEN_PATH}",
                json={"deviceId": latest.device_id, "refreshToken": latest.refresh_token},
            )
            response.read()
            if response.is_error:
                refusal = api_error(response)
                raise CredentialsUnusable(
                    f"the gateway refused to renew this device's credentials "
                    f"(HTTP {refusal.status}: {refusal.message})"
                )
            try:
                grant = msgspec.convert(response.json(), TokenReply)
            except (ValueError, msgspec.ValidationError):
                raise CredentialsUnusable(
                    "the gateway's answer to the credential renewal was unreadable"
                ) from None
            renewed = latest.with_tokens(
                access_token=grant.access_token,
                access_expires_at=grant.access_token_expires_at,
                refresh_token=grant.refresh_token,
                refresh_expires_at=grant.refresh_token_expires_at,
                scopes=grant.scopes or None,
            )
            try:
                self._store.save_tokens(renewed)
            except OSError as exc:
                raise CredentialsUnusable(
                    f"the renewed credentials could not be saved ({exc.strerror or exc}); "
                    "the old ones are no longer valid"
                ) from None
            self._pairing = renewed


def operator_client(store: CredentialStore) -> SkulkClient:
    """A :class:`SkulkClient` for the paired gateway's operator listener.

    Raises :class:`~skulk_cli.operator_credentials.NotPaired` or
    :class:`CredentialsUnusable` when there is no usable pairing.
    """
    pairing = store.load()
    verify: ssl.SSLContext | bool = True
    if _is_tls(pairing.operator_url):
        certificate_pem = store.certificate_pem()
        try:
            if certificate_fingerprint(certificate_pem) != pairing.fingerprint:
                raise CredentialsUnusable(
                    f"{store.certificate_path} no longer matches the paired fingerprint"
                )
            verify = pinned_context(certificate_pem)
        except ValueError:
            raise CredentialsUnusable(f"{store.certificate_path} is not a certificate") from None
    return SkulkClient(pairing.operator_url, verify=verify, auth=OperatorAuth(store, pairing))


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _parse(raw: JsonObject, view: type[T], what: str) -> T:
    try:
        return msgspec.convert(raw, view)
    except msgspec.ValidationError as exc:
        raise PairingRefused(f"the gateway's {what} answer was not understood: {exc}") from None
