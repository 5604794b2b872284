"""Small GGUF files for the hub tests: a real header (GGUF v3) and filler bytes."""

from __future__ import annotations

import struct
from pathlib import Path

_STRING = 8
_UINT32 = 4


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack("<Q", len(data)) + data


def _kv(key: str, value: str | int) -> bytes:
    if isinstance(value, str):
        return _string(key) + struct.pack("<I", _STRING) + _string(value)
    return _string(key) + struct.pack("<I", _UINT32) + struct.pack("<I", value)


def tiny_gguf(
    *,
    layers: int = 2,
    context: int = 2048,
    embedding: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    file_type: int = 15,
    chat_template: str | None = "{% for m in messages %}{{ m.content }}{% endfor %}",
    filler: int = 64 * 1024,
) -> bytes:
    """A llama-architecture GGUF header followed by ``filler`` bytes standing in for
    tensor data (so a test can tell a header read from a whole-file read)."""
    kvs: list[bytes] = [
        _kv("general.architecture", "llama"),
        _kv("general.name", "Tiny Test"),
        _kv("general.file_type", file_type),
        _kv("llama.block_count", layers),
        _kv("llama.context_length", context),
        _kv("llama.embedding_length", embedding),
        _kv("llama.attention.head_count", heads),
        _kv("llama.attention.head_count_kv", kv_heads),
    ]
    if chat_template is not None:
        kvs.append(_kv("tokenizer.chat_template", chat_template))
    header = b"GGUF" + struct.pack("<I", 3) + struct.pack("<Q", 0) + struct.pack("<Q", len(kvs))
    return header + b"".join(kvs) + bytes(range(256)) * (filler // 256)


def write_tiny_gguf(path: Path, **kwargs: int | str | None) -> Path:
    path.write_bytes(tiny_gguf(**kwargs))  # type: ignore[arg-type]
    return path
