"""A bounded reader for the GGUF header: magic, version, counts and metadata.

It reads from any ``BinaryIO`` and stops after the metadata key/values, before the
tensor infos and tensor data, so reading a model's geometry costs the header's
bytes, not the weights'. Every length it reads is checked against a named bound
first, so a corrupt or hostile file gives :class:`GgufError`, never a giant
allocation or an endless loop.

Large arrays (the tokenizer's tokens, scores and merges) are skipped and kept as
:class:`GgufArraySummary` (element type and length only).
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import BinaryIO, Final, TypeAlias

import msgspec

GGUF_MAGIC: Final = b"GGUF"
SUPPORTED_VERSIONS: Final = frozenset({2, 3})

# Bounds. The GGUF spec caps keys at 65,535 bytes. The rest are far beyond any real
# model (Gemma 3's 262,144-token vocabulary, chat templates of tens of KiB) and far
# below what would hurt the node.
MAX_KEY_BYTES: Final = 65_535
MAX_STRING_BYTES: Final = 16 * 1024 * 1024
MAX_ARRAY_LENGTH: Final = 16 * 1024 * 1024
MAX_ARRAY_DEPTH: Final = 4
MAX_METADATA_ENTRIES: Final = 65_536
MAX_TENSOR_COUNT: Final = 1 << 24
MAX_HEADER_BYTES: Final = 512 * 1024 * 1024
# Arrays up to this length are kept in ``metadata``; longer ones are summarised.
MAX_KEPT_ARRAY_LENGTH: Final = 64

_READ_CHUNK = 1 << 20


class GgufError(ValueError):
    """The bytes are not a GGUF header this reader accepts."""


class GgufValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_SCALAR_FORMATS: Final[dict[GgufValueType, str]] = {
    GgufValueType.UINT8: "B",
    GgufValueType.INT8: "b",
    GgufValueType.UINT16: "H",
    GgufValueType.INT16: "h",
    GgufValueType.UINT32: "I",
    GgufValueType.INT32: "i",
    GgufValueType.FLOAT32: "f",
    GgufValueType.BOOL: "?",
    GgufValueType.UINT64: "Q",
    GgufValueType.INT64: "q",
    GgufValueType.FLOAT64: "d",
}

# ``general.file_type`` values (llama.cpp's ``llama_ftype``); gaps are retired types.
FILE_TYPE_NAMES: Final[dict[int, str]] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}


class GgufArraySummary(msgspec.Struct, frozen=True, kw_only=True):
    """An array too long to keep: what it held and how many."""

    element_type: GgufValueType
    length: int


GgufValue: TypeAlias = "int | float | bool | str | GgufArraySummary | tuple[GgufValue, ...]"


class GgufHeader(msgspec.Struct, frozen=True, kw_only=True):
    """The header of one GGUF file, with helpers for the keys Skulk uses."""

    version: int
    tensor_count: int
    metadata: dict[str, GgufValue]
    byte_order: str = "little"

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    def arch_int(self, suffix: str) -> int | None:
        """``{architecture}.{suffix}`` as an int, or ``None`` when absent or not integral.

        Per-layer arrays (some architectures vary head counts by layer) give their
        largest element, the conservative choice for memory arithmetic.
        """
        arch = self.architecture
        if arch is None:
            return None
        return _as_int(self.metadata.get(f"{arch}.{suffix}"))

    @property
    def block_count(self) -> int | None:
        return self.arch_int("block_count")

    @property
    def context_length(self) -> int | None:
        return self.arch_int("context_length")

    @property
    def embedding_length(self) -> int | None:
        return self.arch_int("embedding_length")

    @property
    def head_count(self) -> int | None:
        return self.arch_int("attention.head_count")

    @property
    def head_count_kv(self) -> int | None:
        """KV heads; GGUF omits the key when it equals the attention head count."""
        explicit = self.arch_int("attention.head_count_kv")
        return explicit if explicit is not None else self.head_count

    @property
    def key_length(self) -> int | None:
        """Per-head key dimension: declared, else ``embedding_length / head_count``."""
        declared = self.arch_int("attention.key_length")
        if declared is not None:
            return declared
        embedding, heads = self.embedding_length, self.head_count
        if embedding is None or not heads or embedding % heads:
            return None
        return embedding // heads

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None

    @property
    def file_type(self) -> int | None:
        return _as_int(self.metadata.get("general.file_type"))

    @property
    def quantization(self) -> str | None:
        """The quantization name (``Q4_K_M``, ``F16``...) from ``general.file_type``."""
        file_type = self.file_type
        return None if file_type is None else FILE_TYPE_NAMES.get(file_type)


def _as_int(value: GgufValue | None) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, tuple) and value:
        items = [_as_int(item) for item in value]
        if all(item is not None for item in items):
            return max(item for item in items if item is not None)
    return None


def read_gguf_header(stream: BinaryIO) -> GgufHeader:
    """Read the GGUF header from ``stream``, leaving it positioned after the metadata.

    Raises :class:`GgufError` for a wrong magic, an unsupported version, a
    truncated header, an unknown value type or any length beyond the bounds above.
    """
    return _Reader(stream).header()


class _Reader:
    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._consumed = 0
        self._order = "<"

    def header(self) -> GgufHeader:
        magic = self._read(4)
        if magic != GGUF_MAGIC:
            raise GgufError(f"not a GGUF file (magic {magic!r})")
        raw_version = self._read(4)
        version = struct.unpack("<I", raw_version)[0]
        if version not in SUPPORTED_VERSIONS:
            # NOTE: big-endian GGUF files exist (for s390x); their version reads
            # byte-swapped, which is how llama.cpp's tools tell them apart too.
            swapped = struct.unpack(">I", raw_version)[0]
            if swapped not in SUPPORTED_VERSIONS:
                raise GgufError(f"unsupported GGUF version {version}")
            version, self._order = swapped, ">"
        tensor_count = self._scalar("Q")
        if tensor_count > MAX_TENSOR_COUNT:
            raise GgufError(f"tensor count {tensor_count} exceeds {MAX_TENSOR_COUNT}")
        entries = self._scalar("Q")
        if entries > MAX_METADATA_ENTRIES:
            raise GgufError(f"metadata count {entries} exceeds {MAX_METADATA_ENTRIES}")
        metadata: dict[str, GgufValue] = {}
        for _ in range(entries):
            key = self._string(MAX_KEY_BYTES, "key")
            metadata[key] = self._value(self._value_type(), depth=0, key=key)
        return GgufHeader(
            version=version,
            tensor_count=tensor_count,
            metadata=metadata,
            byte_order="little" if self._order == "<" else "big",
        )

    def _read(self, size: int) -> bytes:
        if self._consumed + size > MAX_HEADER_BYTES:
            raise GgufError(f"GGUF header exceeds {MAX_HEADER_BYTES} bytes")
        data = self._stream.read(size)
        if len(data) != size:
            raise GgufError("GGUF header is truncated")
        self._consumed += size
        return data

    def _skip(self, size: int) -> None:
        while size:
            step = min(size, _READ_CHUNK)
            self._read(step)
            size -= step

    def _scalar(self, fmt: str) -> int:
        data = self._read(struct.calcsize(fmt))
        value: int = struct.unpack(self._order + fmt, data)[0]
        return value

    def _value_type(self) -> GgufValueType:
        raw = self._scalar("I")
        try:
            return GgufValueType(raw)
        except ValueError:
            raise GgufError(f"unknown GGUF value type {raw}") from None

    def _string(self, limit: int, what: str) -> str:
        length = self._scalar("Q")
        if length > limit:
            raise GgufError(f"GGUF {what} length {length} exceeds {limit} bytes")
        try:
            return self._read(length).decode("utf-8")
        except UnicodeDecodeError:
            raise GgufError(f"GGUF {what} is not valid UTF-8") from None

    def _value(self, kind: GgufValueType, *, depth: int, key: str) -> GgufValue:
        if kind is GgufValueType.STRING:
            return self._string(MAX_STRING_BYTES, f"string value of {key!r}")
        if kind is GgufValueType.ARRAY:
            return self._array(depth=depth + 1, key=key)
        fmt = _SCALAR_FORMATS[kind]
        value: int | float | bool = struct.unpack(
            self._order + fmt, self._read(struct.calcsize(fmt))
        )[0]
        return value

    def _array(self, *, depth: int, key: str) -> GgufValue:
        if depth > MAX_ARRAY_DEPTH:
            raise GgufError(f"GGUF array {key!r} nests deeper than {MAX_ARRAY_DEPTH}")
        element = self._value_type()
        length = self._scalar("Q")
        if length > MAX_ARRAY_LENGTH:
            raise GgufError(f"GGUF array {key!r} length {length} exceeds {MAX_ARRAY_LENGTH}")
        if length <= MAX_KEPT_ARRAY_LENGTH:
            return tuple(self._value(element, depth=depth, key=key) for _ in range(length))
        fmt = _SCALAR_FORMATS.get(element)
        if fmt is not None:
            self._skip(struct.calcsize(fmt) * length)
        elif element is GgufValueType.STRING:
            for _ in range(length):
                size = self._scalar("Q")
                if size > MAX_STRING_BYTES:
                    raise GgufError(f"GGUF string in {key!r} exceeds {MAX_STRING_BYTES} bytes")
                self._skip(size)
        else:
            for _ in range(length):
                self._array(depth=depth + 1, key=key)
        return GgufArraySummary(element_type=element, length=length)
