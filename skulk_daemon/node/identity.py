"""The node's persistent identity: an Ed25519 key (owner-only) and an install id."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from skulk_core.ids import NodeId, NodeInstallId, node_id_from_public_key
from skulk_host.fsutil import atomic_write


class IdentityError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    node_id: NodeId
    install_id: NodeInstallId
    private_key: Ed25519PrivateKey


def _load_or_create_key(path: Path) -> Ed25519PrivateKey:
    if path.exists():
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except ValueError as exc:
            raise IdentityError(f"node key {path} is unreadable: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise IdentityError(f"node key {path} is not an Ed25519 key")
        return key
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    atomic_write(path, pem)
    return key


def _load_or_create_install_id(path: Path) -> NodeInstallId:
    if path.exists():
        raw = path.read_text().strip()
        try:
            return NodeInstallId(str(uuid.UUID(raw, version=4)))
        except ValueError:
            raise IdentityError(f"install id file {path} holds {raw!r}, not a UUIDv4") from None
    value = NodeInstallId(str(uuid.uuid4()))
    atomic_write(path, value.encode() + b"\n")
    return value


def load_identity(key_path: Path, install_id_path: Path) -> NodeIdentity:
    key = _load_or_create_key(key_path)
    public = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return NodeIdentity(
        node_id=node_id_from_public_key(public),
        install_id=_load_or_create_install_id(install_id_path),
        private_key=key,
    )
