"""The gateway's pinned TLS identity: a self-signed ECDSA P-256 certificate.

P-256 rather than Ed25519 because every TLS stack a paired device may use (phones,
browsers, OpenSSL) accepts it. Clients pin it by the SHA-256 fingerprint of its public
key (:func:`skulk_core.operator.encoding.public_key_fingerprint`), so it needs no CA and
lives long: renewing it would force every device to pair again.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Final

from skulk_core.operator.encoding import public_key_fingerprint
from skulk_daemon.operator.state import TlsRecord
from skulk_host.fsutil import OWNER_ONLY_FILE, atomic_write

# The listener is loopback-only; the relay's inner TLS also terminates there.
INNER_TLS_SERVER_NAME: Final = "localhost"
CERT_LIFETIME: Final = datetime.timedelta(days=3650)
CERT_FILE: Final = "gateway-tls.crt"
KEY_FILE: Final = "gateway-tls.key"


def generate_tls_identity(cluster_id: str, *, now: float) -> TlsRecord:
    """A fresh key and self-signed server certificate for ``localhost``, 127.0.0.1, ::1."""
    # NOTE: x509 loads where a gateway is first initialized, not at every start (issue 43).
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: PLC0415

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "Skulk operator gateway"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, cluster_id),
        ]
    )
    start = datetime.datetime.fromtimestamp(int(now), tz=datetime.UTC)
    sans = x509.SubjectAlternativeName(
        [
            x509.DNSName(INNER_TLS_SERVER_NAME),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # A little slack for clocks that run behind the gateway's.
        .not_valid_before(start - datetime.timedelta(hours=1))
        .not_valid_after(start + CERT_LIFETIME)
        .add_extension(sans, critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    spki = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return TlsRecord(
        cert_pem=certificate.public_bytes(serialization.Encoding.PEM).decode("ascii"),
        key_pem=key_pem.decode("ascii"),
        fingerprint=public_key_fingerprint(spki),
    )


def materialize(directory: Path, tls: TlsRecord) -> tuple[Path, Path]:
    """Write (only when changed) the PEM files a TLS server loads; both owner-only."""
    cert_path, key_path = directory / CERT_FILE, directory / KEY_FILE
    for path, text in ((cert_path, tls.cert_pem), (key_path, tls.key_pem)):
        data = text.encode("ascii")
        try:
            current = path.read_bytes()
            mode_ok = path.stat().st_mode & 0o077 == 0
        except FileNotFoundError:
            current, mode_ok = b"", False
        if current != data or not mode_ok:
            atomic_write(path, data, OWNER_ONLY_FILE)
    return cert_path, key_path
