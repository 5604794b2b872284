"""Identifier types shared by every layer.

Ids are plain strings on the wire; ``NewType`` keeps them apart in the type checker.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import NewType

NodeId = NewType("NodeId", str)
InstanceId = NewType("InstanceId", str)
RunnerId = NewType("RunnerId", str)
TaskId = NewType("TaskId", str)
CommandId = NewType("CommandId", str)
ModelId = NewType("ModelId", str)
NodeInstallId = NewType("NodeInstallId", str)

_B58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

# libp2p encodes an Ed25519 public key as a protobuf ``PublicKey{Type=Ed25519, Data=key}``
# and, because that is short, wraps it in an *identity* multihash rather than hashing
# it. The base58btc rendering of that always starts ``12D3KooW``.
_ED25519_PROTOBUF_PREFIX = bytes([0x08, 0x01, 0x12, 0x20])
_IDENTITY_MULTIHASH = 0x00
ED25519_PUBLIC_KEY_BYTES = 32


def base58btc(data: bytes) -> str:
    """Bitcoin-alphabet base58, as used by libp2p peer ids."""
    number = int.from_bytes(data, "big")
    out = []
    while number:
        number, rem = divmod(number, 58)
        out.append(_B58_ALPHABET[rem])
    leading_zeros = len(data) - len(data.lstrip(b"\x00"))
    return "1" * leading_zeros + "".join(reversed(out))


def node_id_from_public_key(public_key: bytes) -> NodeId:
    """Derive a libp2p-style peer id (``12D3KooW...``) from a raw Ed25519 public key."""
    if len(public_key) != ED25519_PUBLIC_KEY_BYTES:
        raise ValueError(f"an Ed25519 public key is 32 bytes, got {len(public_key)}")
    encoded = _ED25519_PROTOBUF_PREFIX + public_key
    multihash = bytes([_IDENTITY_MULTIHASH, len(encoded)]) + encoded
    return NodeId(base58btc(multihash))


def new_command_id() -> CommandId:
    return CommandId(str(uuid.uuid4()))


def new_instance_id() -> InstanceId:
    return InstanceId(str(uuid.uuid4()))


def new_runner_id() -> RunnerId:
    return RunnerId(str(uuid.uuid4()))


def new_task_id() -> TaskId:
    return TaskId(str(uuid.uuid4()))


def stable_reference(identifier: str, limit_bytes: int = 256) -> str:
    """Keep an identifier as is, or replace an oversized one by a ``sha256:`` reference."""
    raw = identifier.encode("utf-8")
    if len(raw) <= limit_bytes:
        return identifier
    return "sha256:" + hashlib.sha256(raw).hexdigest()
