"""A guessed cluster key costs an attacker a full scrypt per guess, not one HMAC."""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from zmq.utils import z85

from skulk_daemon.node import keys

PSK = b"correct horse battery staple"


def test_curve_and_gate_keys_come_from_the_stretched_key_only() -> None:
    derived = keys.derive_curve_keys(PSK)
    fast = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"skulk-fabric-curve-v1", info=b"server")
    assert z85.encode(fast.derive(PSK)) != derived.server_secret
    expected = Scrypt(salt=b"skulk-cluster-key-scrypt-v1", length=32, n=2**15, r=8, p=1).derive(PSK)
    assert keys.stretched(PSK) == expected
    slow = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"skulk-fabric-curve-v1", info=b"server")
    assert z85.encode(slow.derive(expected)) == derived.server_secret
    gate = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"skulk-fabric-curve-v1", info=b"rpc-gate"
    )
    assert keys.derive_rpc_gate_key(PSK) == gate.derive(expected)


def test_the_work_factor_is_a_real_one() -> None:
    assert 128 * keys.SCRYPT_N * keys.SCRYPT_R >= 32 * 1024 * 1024
