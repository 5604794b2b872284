"""The test publisher kit: keys, a real wheel, signed releases and catalogs, an HTTPS feed.

Everything a publisher does, done for real and offline:

- :class:`Publisher` holds an Ed25519 key and signs documents exactly as a publisher
  does (Ed25519 over the canonical JSON of ``signed``);
- :func:`build_wheel` writes a real wheel (zip, ``METADATA``, ``WHEEL``,
  ``entry_points.txt`` declaring the owner under ``skulk.capability_runtime``, and a
  ``RECORD`` with every member's SHA-256 and size), optionally with hostile members;
- :func:`release_document` / :func:`catalog_document` make the ``signed`` objects;
- :class:`Feed` serves a directory over HTTPS on loopback with a test CA made here,
  and can misbehave per path (redirect, gzip, status, stall); :attr:`Feed.ssl_context`
  is the client trust to pass explicitly (the system store is never used).
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import hashlib
import ipaddress
import json
import ssl
import threading
import time
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID

from skulk_core.plugins.canonical import canonical_json

NOW = int(time.time())
DAY = 86400


# -- keys and signatures ---------------------------------------------------------------


@dataclass
class Publisher:
    publisher_id: str = "acme"
    key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    @property
    def public_hex(self) -> str:
        raw = self.key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return raw.hex()

    def sign(self, signed: dict[str, Any]) -> bytes:
        """The served envelope of ``signed``, signed by this publisher."""
        signature = self.key.sign(canonical_json(signed)).hex()
        return json.dumps({"signed": signed, "signature": signature}).encode()


def trust_document(
    *publishers: Publisher,
    revision: int = 1,
    expires_at: int = NOW + 30 * DAY,
    revoked_publishers: tuple[str, ...] = (),
    revoked_artifacts: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "revision": revision,
        "expires_at": expires_at,
        "publishers": {p.publisher_id: p.public_hex for p in publishers},
        "revoked_publishers": list(revoked_publishers),
        "revoked_artifacts": list(revoked_artifacts),
    }


# -- wheels ----------------------------------------------------------------------------

OWNER_SOURCE = '''"""The tiny owner: prints its identity and the value it was asked to echo."""

import json
import sys


def main() -> None:
    print(json.dumps({"owner": "tiny", "version": VERSION, "argv": sys.argv[1:]}))


VERSION = "{version}"
'''


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


@dataclass(frozen=True)
class Wheel:
    path: Path
    sha256: str
    size: int

    def artifact(self) -> dict[str, Any]:
        return {"filename": self.path.name, "sha256": self.sha256, "bytes": self.size}


def build_wheel(
    out_dir: Path,
    *,
    dist: str = "tiny_owner",
    version: str = "1.0.0",
    owner: bool = True,
    extra_members: dict[str, bytes] | None = None,
    symlink_member: str | None = None,
    bad_record: bool = False,
) -> Wheel:
    """A real pure-Python wheel of package ``dist``; ``extra_members`` adds raw members
    (a path-escaping name, say), ``symlink_member`` adds a member marked as a symlink."""
    out_dir.mkdir(parents=True, exist_ok=True)
    info = f"{dist}-{version}.dist-info"
    members: dict[str, bytes] = {
        f"{dist}/__init__.py": b'"""A tiny managed-plugin owner package (test kit)."""\n',
        f"{dist}/owner.py": OWNER_SOURCE.replace("{version}", version).encode(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
            "Summary: a tiny owner for the Skulk plugin tests\n"
        ).encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: skulk-test-kit\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    if owner:
        members[f"{info}/entry_points.txt"] = (
            f"[skulk.capability_runtime]\nowner = {dist}.owner:main\n".encode()
        )
    members.update(extra_members or {})
    record_lines = [f"{name},{_record_hash(data)},{len(data)}" for name, data in members.items()]
    if bad_record:
        record_lines[0] = record_lines[0].replace("sha256=", "sha256=AAAA")
    record_lines.append(f"{info}/RECORD,,")
    members[f"{info}/RECORD"] = ("\n".join(record_lines) + "\n").encode()
    path = out_dir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data)
        if symlink_member is not None:
            link = zipfile.ZipInfo(symlink_member, date_time=(2024, 1, 1, 0, 0, 0))
            link.external_attr = (0o120777 << 16) | 0
            archive.writestr(link, b"/etc/passwd")
    data = path.read_bytes()
    return Wheel(path=path, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


# -- documents -------------------------------------------------------------------------


def release_document(
    publisher: Publisher,
    wheels: list[Wheel],
    *,
    sequence: int = 1,
    version: str = "1.0.0",
    bundle_id: str = "acme.tiny",
    protocol: int = 1,
    runtime_protocol: int = 1,
    platform: str = "any",
    python_requires: str = ">=3.11",
    expires_at: int = NOW + 7 * DAY,
    created_at: int = NOW - 60,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "type": "skulk.release",
        "protocol": protocol,
        "publisher": publisher.publisher_id,
        "bundle_id": bundle_id,
        "title": "Tiny owner",
        "version": version,
        "sequence": sequence,
        "created_at": created_at,
        "expires_at": expires_at,
        "platform": platform,
        "skulk_build_sha256": None,
        "permissions": ["network:loopback"],
        "runtime": {
            "protocol": runtime_protocol,
            "python_requires": python_requires,
            "wheels": [wheel.artifact() for wheel in wheels],
        },
        **extra,
    }


def catalog_entry(release: dict[str, Any], digest: str, release_url: str) -> dict[str, Any]:
    wheels = release["runtime"]["wheels"]
    return {
        "bundle_id": release["bundle_id"],
        "bundle_version": release["version"],
        "title": release["title"],
        "publisher": release["publisher"],
        "sequence": release["sequence"],
        "release_digest": digest,
        "runtime_platform": release["platform"],
        "artifact_sha256": wheels[0]["sha256"],
        "artifact_bytes": wheels[0]["bytes"],
        "transfer_bytes": sum(w["bytes"] for w in wheels),
        "platforms": [release["platform"]],
        "skulk_build_sha256": None,
        "permissions": release["permissions"],
        "descriptors": ["tiny.echo"],
        "surfaces": [],
        "operations": [],
        "steward_risks": [],
        "expires_at": release["expires_at"],
        "release_url": release_url,
    }


def catalog_document(
    publisher: Publisher,
    entries: list[dict[str, Any]],
    *,
    revision: int = 1,
    protocol: int = 1,
    expires_at: int = NOW + 7 * DAY,
    created_at: int = NOW - 60,
) -> dict[str, Any]:
    return {
        "type": "skulk.catalog",
        "protocol": protocol,
        "publisher": publisher.publisher_id,
        "revision": revision,
        "created_at": created_at,
        "expires_at": expires_at,
        "entries": entries,
    }


# -- the HTTPS feed --------------------------------------------------------------------


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_tls(directory: Path) -> tuple[Path, Path, bytes]:
    """A test CA and a loopback server certificate it signs: (cert, key, CA PEM)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    end = start + dt.timedelta(days=2)
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("skulk test feed CA"))
        .issuer_name(_name("skulk test feed CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.OID_SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path, ca.public_bytes(serialization.Encoding.PEM)


@dataclass
class Feed:
    """An HTTPS release directory on loopback, serving :attr:`files` under ``/feed/``."""

    tls_dir: Path
    files: dict[str, bytes] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    gzipped: set[str] = field(default_factory=set)
    statuses: dict[str, int] = field(default_factory=dict)
    oversize: dict[str, int] = field(default_factory=dict)
    """Serve this many extra bytes after a file (a feed lying about a size)."""
    token: str | None = None
    requests: list[tuple[str, bool]] = field(default_factory=list)
    """``(path, carried the bearer)`` for every request, in order."""

    def __post_init__(self) -> None:
        cert, key, ca_pem = make_tls(self.tls_dir)
        self.ca_pem = ca_pem
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(cert, key)
        feed = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                name = self.path.removeprefix("/feed/")
                bearer = self.headers.get("Authorization")
                feed.requests.append((name, bearer is not None))
                if feed.token is not None and bearer != f"Bearer {feed.token}":
                    self._send(401, b"no")
                    return
                if name in feed.redirects:
                    self.send_response(302)
                    self.send_header("Location", feed.redirects[name])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if name in feed.statuses:
                    self._send(feed.statuses[name], b"refused")
                    return
                data = feed.files.get(name)
                if data is None:
                    self._send(404, b"not found")
                    return
                if name in feed.gzipped:
                    self._send(200, gzip.compress(data), {"Content-Encoding": "gzip"})
                    return
                self._send(200, data + b"\0" * feed.oversize.get(name, 0))

            def _send(
                self, status: int, body: bytes, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.socket = server_context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}/feed/"

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """Client trust for this feed only: the test CA, never the system store."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cadata=self.ca_pem.decode())
        return context

    def publish(self, name: str, data: bytes) -> None:
        self.files[name] = data

    def publish_wheel(self, wheel: Wheel) -> None:
        self.files[wheel.path.name] = wheel.path.read_bytes()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
