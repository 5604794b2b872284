"""This CLI's paired-device credentials: an owner-only store under the CLI's config home.

One pairing at a time, in ``<config home>/operator/`` (0700): ``credentials.json``
(0600) holds the device id, the rotating token pair and their expiries;
``gateway.pem`` (0600) is the gateway certificate the pairing pinned. Every write goes
to a temporary file that is fsynced and renamed over the old one, so a reader sees the
old pair or the new pair, never half of each. The private device key is not kept:
it proves possession once, during the exchange, and nothing after needs it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from skulk_cli.private_files import PRIVATE_FILE_MODE, write_new_private

CONFIG_HOME_ENV = "SKULK_CONFIG_HOME"
DEFAULT_CONFIG_HOME = Path(".config") / "skulk"
STORE_DIR_NAME = "operator"
CREDENTIALS_FILE = "credentials.json"
CERTIFICATE_FILE = "gateway.pem"
LOCK_FILE = ".lock"
FORMAT_VERSION = 1
_PRIVATE_DIR = 0o700

PAIR_AGAIN_HINT = (
    "Pair again: run `skulk operator pair` on the gateway host, then "
    "`skulk operator connect PAYLOAD` here."
)


class NotPaired(Exception):
    """No pairing is stored; ``--operator`` and the device commands need one."""


class CredentialsUnusable(Exception):
    """The stored pairing cannot be used (unreadable, unsafe permissions, or refused).

    The message says why and never contains a credential; callers add
    :data:`PAIR_AGAIN_HINT`.
    """


class StoredPairing(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One paired gateway, as this device sees it.

    ``operator_url`` is the gateway's operator listener origin (the package's exchange
    URL). ``repr`` leaves the tokens out, so a traceback or a debug print cannot leak
    them.
    """

    version: int = FORMAT_VERSION
    cluster_id: str
    cluster_name: str | None = None
    operator_url: str
    fingerprint: str
    device_id: str
    device_name: str
    scopes: tuple[str, ...] = ()
    paired_at: datetime
    access_token: str
    access_expires_at: datetime
    refresh_token: str
    refresh_expires_at: datetime

    def __repr__(self) -> str:
        return (
            f"StoredPairing(cluster_id={self.cluster_id!r}, device_id={self.device_id!r}, "
            f"operator_url={self.operator_url!r}, tokens=<redacted>)"
        )

    def with_tokens(
        self,
        *,
        access_token: str,
        access_expires_at: datetime,
        refresh_token: str,
        refresh_expires_at: datetime,
        scopes: tuple[str, ...] | None = None,
    ) -> StoredPairing:
        """The same pairing with a rotated token pair (both members replaced together)."""
        return msgspec.structs.replace(
            self,
            access_token=access_token,
            access_expires_at=access_expires_at,
            refresh_token=refresh_token,
            refresh_expires_at=refresh_expires_at,
            scopes=self.scopes if scopes is None else scopes,
        )


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(StoredPairing)


def config_home() -> Path:
    """The CLI's config home: ``SKULK_CONFIG_HOME``, else ``~/.config/skulk``."""
    value = os.environ.get(CONFIG_HOME_ENV)
    return Path(value) if value else Path.home() / DEFAULT_CONFIG_HOME


def utc_now() -> datetime:
    return datetime.now(UTC)


class CredentialStore:
    """The owner-only directory holding this CLI's one pairing."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def default(cls) -> CredentialStore:
        return cls(config_home() / STORE_DIR_NAME)

    @property
    def credentials_path(self) -> Path:
        return self.directory / CREDENTIALS_FILE

    @property
    def certificate_path(self) -> Path:
        return self.directory / CERTIFICATE_FILE

    def exists(self) -> bool:
        return self.credentials_path.exists()

    def load(self) -> StoredPairing:
        """The stored pairing; :class:`NotPaired` when there is none.

        Raises :class:`CredentialsUnusable` when the files are unreadable, malformed,
        or readable by anyone but the owner (as ssh does, a credential others could
        have copied is not used).
        """
        try:
            raw = self._read_private(self.credentials_path)
        except FileNotFoundError:
            raise NotPaired("this CLI is not paired with a gateway") from None
        try:
            pairing = _decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise CredentialsUnusable(
                f"{self.credentials_path} is not a pairing this CLI can read"
            ) from None
        if pairing.version != FORMAT_VERSION:
            raise CredentialsUnusable(
                f"{self.credentials_path} has format version {pairing.version}, "
                f"this CLI reads {FORMAT_VERSION}"
            )
        return pairing

    def certificate_pem(self) -> str:
        """The pinned gateway certificate (PEM)."""
        try:
            return self._read_private(self.certificate_path).decode("ascii")
        except FileNotFoundError:
            raise CredentialsUnusable(
                f"the pinned gateway certificate {self.certificate_path} is missing"
            ) from None
        except UnicodeDecodeError:
            raise CredentialsUnusable(f"{self.certificate_path} is not a PEM file") from None

    def save(self, pairing: StoredPairing, certificate_pem: str | None) -> None:
        """Store a new pairing and its pinned certificate, replacing any previous one.

        ``certificate_pem`` is ``None`` for a cleartext loopback (development) gateway,
        which has no TLS to pin.

        NOTE: the certificate is written first; the credentials file is what makes the
        pairing exist, so an interrupted save leaves the old pairing (or none), never
        new tokens pinned to an old certificate.
        """
        self._ensure_directory()
        if certificate_pem is None:
            self.certificate_path.unlink(missing_ok=True)
        else:
            _atomic_write(self.certificate_path, certificate_pem.encode("ascii"))
        _atomic_write(self.credentials_path, _encoder.encode(pairing))

    def save_tokens(self, pairing: StoredPairing) -> None:
        """Replace the stored token pair in one atomic write (the certificate stays)."""
        self._ensure_directory()
        _atomic_write(self.credentials_path, _encoder.encode(pairing))

    def forget(self) -> bool:
        """Delete the stored pairing and certificate; ``False`` when there was none."""
        existed = self.credentials_path.exists()
        # Credentials first: without them the certificate alone pairs nothing.
        self.credentials_path.unlink(missing_ok=True)
        self.certificate_path.unlink(missing_ok=True)
        return existed

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the store's lock: one process at a time rotates the token pair.

        NOTE: two CLI processes refreshing at once would each send the same refresh
        token; the gateway rotates on the first and rejects the second as a replay,
        which would look like a lost pairing. Under the lock, the second one rereads
        the file and finds the fresh pair instead.
        """
        # Imported here: POSIX only, and only rotation needs it.
        import fcntl  # noqa: PLC0415

        self._ensure_directory()
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _ensure_directory(self) -> None:
        self.directory.mkdir(mode=_PRIVATE_DIR, parents=True, exist_ok=True)
        # mkdir's mode is masked by the umask, and an existing directory keeps its own.
        os.chmod(self.directory, _PRIVATE_DIR)

    def _read_private(self, path: Path) -> bytes:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_IMODE(mode) & 0o077:
                raise CredentialsUnusable(
                    f"{path} is readable by other users (mode {stat.S_IMODE(mode):04o}); "
                    "its credentials may have been copied"
                )
            with os.fdopen(fd, "rb", closefd=False) as handle:
                return handle.read()
        finally:
            os.close(fd)


def _atomic_write(path: Path, content: bytes) -> None:
    """Write ``content`` to a fresh owner-only temp file, fsync it, rename it over ``path``."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    write_new_private(temporary, content)
    os.replace(temporary, path)
    # The rename itself is durable only once the directory entry is.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
