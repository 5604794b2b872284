"""The cluster pre-shared key, and the ZeroMQ CURVE keys derived from it.

Every node that holds the key derives the same two CURVE key pairs: one every
node's fabric socket serves with, one every node connects with. A process without
the key knows neither secret, so it cannot complete a CURVE handshake with a node
(it cannot join, read or inject), and the ZAP handler additionally admits only the
derived client key.

The key comes from ``SKULK_CLUSTER_KEY``, else ``cluster.key`` in ``skulk.yaml``,
else a file in the data dir, generated (owner-only) on first start. Nodes of one
cluster must share it: copy it from the first node to the others.

Every dial hands whoever answers a CURVE handshake to test key guesses against, so a
human-chosen key is first stretched with scrypt (:func:`stretched`, ~32 MiB and tens
of milliseconds, once per process): an offline guess costs the same.
"""

from __future__ import annotations

import functools
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import zmq
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from zmq.utils import z85

from skulk_host.fsutil import atomic_write

CLUSTER_KEY_ENV: Final = "SKULK_CLUSTER_KEY"
CLUSTER_KEY_FILE: Final = "cluster.key"
_SALT: Final = b"skulk-fabric-curve-v1"
_STRETCH_SALT: Final = b"skulk-cluster-key-scrypt-v1"
SCRYPT_N: Final = 2**15
"""scrypt's cost: 32 MiB of memory (128 * N * r bytes) per derivation."""
SCRYPT_R: Final = 8


class ClusterKeyError(ValueError):
    """The configured cluster key cannot be used; the message says why."""


@dataclass(frozen=True, slots=True, repr=False)
class CurveKeys:
    """Z85-encoded CURVE keys (``repr`` hides them: they must never reach a log)."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes


@functools.lru_cache(maxsize=4)
def stretched(psk: bytes) -> bytes:
    """The cluster key through scrypt: what every other secret is derived from."""
    return Scrypt(salt=_STRETCH_SALT, length=32, n=SCRYPT_N, r=SCRYPT_R, p=1).derive(psk)


def _derive(psk: bytes, role: bytes) -> tuple[bytes, bytes]:
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=role).derive(stretched(psk))
    secret = z85.encode(seed)
    return zmq.curve_public(secret), secret


def derive_curve_keys(psk: bytes) -> CurveKeys:
    if len(psk) < 16:
        raise ClusterKeyError("the cluster key must be at least 16 bytes")
    server_public, server_secret = _derive(psk, b"server")
    client_public, client_secret = _derive(psk, b"client")
    return CurveKeys(server_public, server_secret, client_public, client_secret)


def derive_rpc_gate_key(psk: bytes) -> bytes:
    """The secret llama.cpp RPC pools admit drivers by (see runner/rpc_gate.py):
    derived from the cluster key, so only members can reach a donor's memory."""
    if len(psk) < 16:
        raise ClusterKeyError("the cluster key must be at least 16 bytes")
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=b"rpc-gate").derive(
        stretched(psk)
    )


RPC_RELAY_INFO: Final = b"skulk-rpc-relay-v1\x00"
RPC_RELAY_KEY_BYTES: Final = 32


def derive_rpc_relay_keys(
    gate_key: bytes, instance_id: str, driver_nonce: bytes, gate_nonce: bytes
) -> tuple[bytes, bytes]:
    """One RPC gate connection's AEAD keys: ``(driver to donor, donor to driver)``.

    HKDF over the pool's gate key (itself HKDF over the stretched cluster key) with
    its own info string, so these keys are independent of the challenge answers made
    with the gate key. Salted with both sides' fresh nonces, so every connection has
    its own keys, and a man in the middle who relays the handshake learns neither.
    """
    okm = HKDF(
        algorithm=hashes.SHA256(),
        length=2 * RPC_RELAY_KEY_BYTES,
        salt=driver_nonce + gate_nonce,
        info=RPC_RELAY_INFO + instance_id.encode(),
    ).derive(gate_key)
    return okm[:RPC_RELAY_KEY_BYTES], okm[RPC_RELAY_KEY_BYTES:]


def load_cluster_key(data_dir: Path, configured: str | None) -> bytes:
    """The cluster key: env, then config, then the data dir's key file (created
    owner-only with 32 random bytes when absent)."""
    for source in (os.environ.get(CLUSTER_KEY_ENV), configured):
        if source:
            if len(source.encode()) < 16:
                raise ClusterKeyError("the cluster key must be at least 16 characters")
            return source.encode()
    path = data_dir / CLUSTER_KEY_FILE
    if path.exists():
        key = path.read_text().strip()
        if len(key) < 16:
            raise ClusterKeyError(f"{path} holds no usable key (at least 16 characters)")
        return key.encode()
    key = secrets.token_urlsafe(32)
    atomic_write(path, key.encode() + b"\n")
    return key.encode()
