"""The encrypted, owner-only authority store, safe to share between processes.

Layout (``<data_dir>/operator/``, directory 0700, every file 0600):

- ``authority.key``: 32 random bytes, the AES-256-GCM key;
- ``authority.store``: the journal's current generation (format below);
- ``authority.lock``: the ``fcntl.flock`` lock file (shared to read, exclusive to write).

``authority.store`` is ``header || ciphertext`` where the header is
``MAGIC (12) || store id (16) || sequence (8, big-endian) || nonce (12) || length (4)``
and the ciphertext (``length`` bytes, GCM tag included) seals the msgpack-encoded
:class:`AuthorityState`. The whole header is the associated data, so each generation is
bound to its store and its sequence number; the sequence grows by one per commit.

Crash safety: a commit writes the next generation to a temporary file, fsyncs it, renames
it over ``authority.store`` and fsyncs the directory, so a crash leaves the previous
generation or the next one, never a torn record. There is therefore no torn-tail rule to
apply: a short file, trailing bytes, a changed byte, a missing key or a wrong key all
raise :class:`StoreCorrupt`, and nothing ever resets the store to empty.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from skulk_daemon.operator.errors import StoreCorrupt
from skulk_daemon.operator.state import AuthorityState
from skulk_host.fsutil import OWNER_ONLY_DIR, OWNER_ONLY_FILE, atomic_write, fsync_dir

MAGIC: Final = b"SKULK-AUTH1\n"
KEY_BYTES: Final = 32
_HEADER = struct.Struct(">12s16sQ12sI")
_NONCE_BYTES = 12
# A store this large is not ours (the state is a few KiB even with many devices).
MAX_STORE_BYTES: Final = 16 * 1024 * 1024

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(AuthorityState)


@dataclass(slots=True)
class Transaction:
    """One exclusive transaction: set or change ``state``; it commits when the block exits.

    ``state`` is ``None`` while the store is uninitialized; assigning one creates it.
    Leaving the block with an exception writes nothing. Set ``write = False`` to commit
    nothing (a transaction that found nothing to change).
    """

    state: AuthorityState | None
    write: bool = True


class AuthorityStore:
    """The journal under ``directory``, with a per-process cache of the last read."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.store_path = directory / "authority.store"
        self.key_path = directory / "authority.key"
        self.lock_path = directory / "authority.lock"
        # (stat identity, store id, sequence, state) of the last generation read.
        self._cache: tuple[tuple[int, ...], bytes, int, AuthorityState] | None = None

    def exists(self) -> bool:
        return self.store_path.exists()

    def snapshot(self) -> AuthorityState | None:
        """The current state (shared lock), or ``None`` when uninitialized.

        The result is shared with later calls: treat it as read-only.
        """
        if not self.exists():
            return None
        with self._locked(fcntl.LOCK_SH):
            loaded = self._load()
        return None if loaded is None else loaded[2]

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Run a read-modify-write under the exclusive lock; commit on a clean exit.

        NOTE: the lock is an flock on a separate file, held for the whole transaction, so
        the daemon and the CLI host tool (another process) and threads in one process
        (each call opens its own descriptor) serialize their transitions: the second one
        sees the first one's committed result, never a lost update.
        """
        self._ensure_directory()
        with self._locked(fcntl.LOCK_EX):
            loaded = self._load() if self.exists() else None
            if loaded is None:
                store_id, sequence, state = os.urandom(16), 0, None
            else:
                store_id, sequence, _ = loaded
                # A private copy: the transaction may mutate it and then fail.
                state = _DECODER.decode(_ENCODER.encode(loaded[2]))
            txn = Transaction(state)
            yield txn
            if txn.write and txn.state is not None:
                self._write(store_id, sequence + 1, txn.state)

    # internals -----------------------------------------------------------------------

    def _ensure_directory(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=OWNER_ONLY_DIR)
        if stat.S_IMODE(self.directory.stat().st_mode) != OWNER_ONLY_DIR:
            os.chmod(self.directory, OWNER_ONLY_DIR)

    @contextlib.contextmanager
    def _locked(self, operation: int) -> Iterator[None]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, OWNER_ONLY_FILE)
        try:
            fcntl.flock(fd, operation)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def _key(self, *, create: bool) -> bytes:
        try:
            fd = os.open(self.key_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                raise StoreCorrupt(
                    f"the authority key {self.key_path} is missing; refusing to read the store"
                ) from None
            return self._create_key()
        with os.fdopen(fd, "rb") as handle:
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            key = handle.read(KEY_BYTES + 1)
        if mode & 0o077:
            raise StoreCorrupt(f"the authority key {self.key_path} is readable by other users")
        if len(key) != KEY_BYTES:
            raise StoreCorrupt(f"the authority key {self.key_path} is damaged")
        return key

    def _create_key(self) -> bytes:
        key = AESGCM.generate_key(bit_length=256)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        fd = os.open(self.key_path, flags, OWNER_ONLY_FILE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
            handle.flush()
            os.fsync(handle.fileno())
        fsync_dir(self.directory)
        return key

    def _load(self) -> tuple[bytes, int, AuthorityState] | None:
        try:
            fd = os.open(self.store_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            identity = (info.st_ino, info.st_dev, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            if self._cache is not None and self._cache[0] == identity:
                return self._cache[1:]
            if info.st_size > MAX_STORE_BYTES:
                raise StoreCorrupt("the authority store is larger than any store Skulk writes")
            blob = handle.read()
        store_id, sequence, state = self._open_blob(blob)
        self._cache = (identity, store_id, sequence, state)
        return store_id, sequence, state

    def _open_blob(self, blob: bytes) -> tuple[bytes, int, AuthorityState]:
        if len(blob) < _HEADER.size:
            raise StoreCorrupt("the authority store is truncated")
        magic, store_id, sequence, nonce, length = _HEADER.unpack_from(blob)
        if magic != MAGIC:
            raise StoreCorrupt("the authority store has an unknown format")
        if len(blob) != _HEADER.size + length:
            raise StoreCorrupt("the authority store is truncated or has trailing bytes")
        key = self._key(create=False)
        try:
            plaintext = AESGCM(key).decrypt(nonce, blob[_HEADER.size :], blob[: _HEADER.size])
        except InvalidTag:
            raise StoreCorrupt(
                "the authority store failed authentication (tampered, or the wrong key)"
            ) from None
        try:
            state = _DECODER.decode(plaintext)
        except msgspec.DecodeError:
            raise StoreCorrupt("the authority store's contents are not a valid state") from None
        return store_id, sequence, state

    def _write(self, store_id: bytes, sequence: int, state: AuthorityState) -> None:
        key = self._key(create=True)
        plaintext = _ENCODER.encode(state)
        nonce = os.urandom(_NONCE_BYTES)
        length = len(plaintext) + 16  # the GCM tag
        header = _HEADER.pack(MAGIC, store_id, sequence, nonce, length)
        ciphertext = AESGCM(key).encrypt(nonce, plaintext, header)
        atomic_write(self.store_path, header + ciphertext, OWNER_ONLY_FILE)
        self._cache = None
