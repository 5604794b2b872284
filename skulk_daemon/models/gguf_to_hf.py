"""A Gemma 3 GGUF as the Hugging Face layout ``mlx-lm`` loads (the MLX demo's first step).

The demo ships only as a quantized GGUF; MLX reads safetensors plus ``config.json``
and a ``tokenizer.json``. This reads the GGUF directly (the key/value section and
the tensor table, with numpy, because ``gguf.GGUFReader`` spends a minute turning
262,144 vocabulary strings into arrays), dequantizes each tensor with the ``gguf``
package, undoes what llama.cpp's converter did to Gemma (it stores RMSNorm weights
as ``1 + w``), and writes bfloat16 safetensors under Hugging Face names. The
tokenizer is rebuilt from the GGUF vocabulary by ``transformers``' own GGUF
tokenizer converter (Gemma's merges are implied by the vocabulary order).

Runs in a subprocess (``python -m skulk_daemon.models.gguf_to_hf GGUF OUT``) so
the daemon never maps MLX or ``transformers`` itself.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

import numpy as np

GGUF_MAGIC: Final = b"GGUF"
DEFAULT_ALIGNMENT: Final = 32
SUPPORTED_ARCHITECTURES: Final = frozenset({"gemma3"})

_SCALARS: Final[dict[int, str]] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_NUMPY: Final[dict[int, str]] = {
    0: "<u1",
    1: "<i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    7: "<u1",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}
_STRING: Final = 8
_ARRAY: Final = 9

Value = int | float | bool | str | list[str] | np.ndarray

# GGUF tensor name -> Hugging Face name (per layer: ``blk.N.<key>``).
_LAYER_NAMES: Final = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES: Final = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}


class ConversionError(ValueError):
    """The GGUF is not one this converter understands."""


class TensorInfo:
    __slots__ = ("dims", "ggml_type", "name", "offset")

    def __init__(self, name: str, dims: tuple[int, ...], ggml_type: int, offset: int) -> None:
        self.name = name
        self.dims = dims
        self.ggml_type = ggml_type
        self.offset = offset


class GgufFile:
    """The key/values (arrays as lists or numpy arrays) and the tensor table."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with path.open("rb") as handle:
            if handle.read(4) != GGUF_MAGIC:
                raise ConversionError(f"{path.name} is not a GGUF file")
            (version,) = struct.unpack("<I", handle.read(4))
            if version < 2:
                raise ConversionError(f"GGUF version {version} is too old")
            n_tensors, n_kv = struct.unpack("<QQ", handle.read(16))
            self.values: dict[str, Value] = {}
            for _ in range(n_kv):
                key = _string(handle)
                (kind,) = struct.unpack("<I", handle.read(4))
                self.values[key] = _value(handle, kind)
            self.tensors: list[TensorInfo] = []
            for _ in range(n_tensors):
                name = _string(handle)
                (n_dims,) = struct.unpack("<I", handle.read(4))
                dims = struct.unpack(f"<{n_dims}Q", handle.read(8 * n_dims))
                ggml_type, offset = struct.unpack("<IQ", handle.read(12))
                self.tensors.append(TensorInfo(name, dims, ggml_type, offset))
            alignment = self.values.get("general.alignment", DEFAULT_ALIGNMENT)
            assert isinstance(alignment, int)
            position = handle.tell()
            self.data_start = position + (-position % alignment)

    def int(self, key: str) -> int:
        value = self.values.get(key)
        if not isinstance(value, int):
            raise ConversionError(f"the GGUF has no integer {key}")
        return value

    def float(self, key: str, default: float) -> float:
        value = self.values.get(key, default)
        if not isinstance(value, (int, float)):
            raise ConversionError(f"the GGUF's {key} is not a number")
        return float(value)

    def dequantized(self) -> Iterator[tuple[str, np.ndarray]]:
        """``(gguf name, float32 array in Hugging Face's (out, in) order)``."""
        from gguf import GGMLQuantizationType  # noqa: PLC0415 (the subprocess's import)
        from gguf.constants import GGML_QUANT_SIZES  # noqa: PLC0415
        from gguf.quants import dequantize  # noqa: PLC0415

        blob = np.memmap(self.path, dtype=np.uint8, mode="r")
        for info in self.tensors:
            kind = GGMLQuantizationType(info.ggml_type)
            block, size = GGML_QUANT_SIZES[kind]
            count = int(np.prod(info.dims))
            n_bytes = count // block * size
            start = self.data_start + info.offset
            raw = np.asarray(blob[start : start + n_bytes])
            shape = tuple(reversed(info.dims))
            if kind == GGMLQuantizationType.F32:
                array = raw.view(np.float32).reshape(shape)
            else:
                rows = raw.reshape(*shape[:-1], -1)
                array = dequantize(rows, kind).reshape(shape).astype(np.float32)
            yield info.name, array


def _string(handle: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", handle.read(8))
    return handle.read(length).decode("utf-8", errors="replace")


def _value(handle: BinaryIO, kind: int) -> Value:
    if kind == _STRING:
        return _string(handle)
    if kind == _ARRAY:
        item, count = struct.unpack("<IQ", handle.read(12))
        if item == _STRING:
            return [_string(handle) for _ in range(count)]
        dtype = np.dtype(_NUMPY[item])
        return np.frombuffer(handle.read(dtype.itemsize * count), dtype=dtype)
    (value,) = struct.unpack(_SCALARS[kind], handle.read(struct.calcsize(_SCALARS[kind])))
    return value  # type: ignore[no-any-return]


def hf_name(gguf_name: str) -> str:
    """The Hugging Face name of a Gemma 3 GGUF tensor."""
    stem, _, suffix = gguf_name.rpartition(".")
    if stem in _TOP_NAMES:
        return f"{_TOP_NAMES[stem]}.{suffix}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{suffix}"
    raise ConversionError(f"no Hugging Face name for the GGUF tensor {gguf_name}")


def hf_config(gguf: GgufFile) -> dict[str, object]:
    """``config.json`` for ``mlx-lm``'s ``gemma3_text`` model."""
    arch = gguf.values.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ConversionError(f"converting {arch!r} GGUFs to MLX is not supported")
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "hidden_size": gguf.int("gemma3.embedding_length"),
        "num_hidden_layers": gguf.int("gemma3.block_count"),
        "intermediate_size": gguf.int("gemma3.feed_forward_length"),
        "num_attention_heads": gguf.int("gemma3.attention.head_count"),
        "num_key_value_heads": gguf.int("gemma3.attention.head_count_kv"),
        "head_dim": gguf.int("gemma3.attention.key_length"),
        "rms_norm_eps": gguf.float("gemma3.attention.layer_norm_rms_epsilon", 1e-6),
        "rope_theta": gguf.float("gemma3.rope.freq_base", 1_000_000.0),
        "rope_local_base_freq": 10_000.0,
        "query_pre_attn_scalar": gguf.int("gemma3.attention.key_length"),
        "sliding_window": gguf.int("gemma3.attention.sliding_window"),
        "sliding_window_pattern": 6,
        "max_position_embeddings": gguf.int("gemma3.context_length"),
        "vocab_size": len(_tokens(gguf)),
        "bos_token_id": gguf.int("tokenizer.ggml.bos_token_id"),
        "eos_token_id": gguf.int("tokenizer.ggml.eos_token_id"),
        "pad_token_id": gguf.int("tokenizer.ggml.padding_token_id"),
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def _tokens(gguf: GgufFile) -> list[str]:
    tokens = gguf.values.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        raise ConversionError("the GGUF carries no vocabulary")
    return tokens


def _list(value: Value | None) -> list[object]:
    # transformers' converter tests these arrays for truth, which numpy refuses.
    return [] if value is None else list(np.asarray(value).tolist())


def write_tokenizer(gguf: GgufFile, out: Path) -> None:
    """``tokenizer.json`` and ``tokenizer_config.json`` from the GGUF vocabulary."""
    from tokenizers import processors  # noqa: PLC0415
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (  # noqa: PLC0415
        convert_gguf_tokenizer,
    )

    tokens = _tokens(gguf)
    ids = {
        "bos": gguf.int("tokenizer.ggml.bos_token_id"),
        "eos": gguf.int("tokenizer.ggml.eos_token_id"),
        "unk": gguf.int("tokenizer.ggml.unknown_token_id"),
        "pad": gguf.int("tokenizer.ggml.padding_token_id"),
    }
    described = {
        "tokenizer_type": gguf.values.get("tokenizer.ggml.model"),
        "tokens": tokens,
        "scores": _list(gguf.values.get("tokenizer.ggml.scores")),
        "token_type": _list(gguf.values.get("tokenizer.ggml.token_type")),
        "bos_token_id": ids["bos"],
        "eos_token_id": ids["eos"],
        "unk_token_id": ids["unk"],
        "pad_token_id": ids["pad"],
        "add_prefix_space": bool(gguf.values.get("tokenizer.ggml.add_space_prefix", False)),
    }
    backend, _ = convert_gguf_tokenizer("gemma3", described)
    bos = tokens[ids["bos"]]
    if gguf.values.get("tokenizer.ggml.add_bos_token", True):
        # llama.cpp puts BOS before every prompt of this vocabulary; so must MLX.
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, ids["bos"])]
        )
    backend.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": tokens[ids["eos"]],
        "unk_token": tokens[ids["unk"]],
        "pad_token": tokens[ids["pad"]],
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": gguf.int("gemma3.context_length"),
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def write_hf_layout(gguf_path: Path, out: Path) -> None:
    """The GGUF at ``gguf_path`` as an unquantized Hugging Face checkout in ``out``."""
    import mlx.core as mx  # noqa: PLC0415 (bfloat16, which numpy lacks)

    gguf = GgufFile(gguf_path)
    config = hf_config(gguf)
    out.mkdir(parents=True, exist_ok=True)
    weights: dict[str, mx.array] = {}
    for name, stored in gguf.dequantized():
        # NOTE: llama.cpp's Gemma converter stores RMSNorm weights as 1 + w;
        # the Hugging Face (and mlx-lm) model adds the 1 itself.
        array = stored - 1.0 if name.endswith("norm.weight") else stored
        weights[hf_name(name)] = mx.array(array).astype(mx.bfloat16)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    write_tokenizer(gguf, out)


def convert_to_mlx(
    gguf_path: Path, hf_dir: Path, mlx_dir: Path, *, bits: int, dtype: str = "float32"
) -> None:
    """GGUF -> Hugging Face layout in ``hf_dir`` -> ``mlx-lm``'s quantized model in ``mlx_dir``."""
    from mlx_lm import convert  # noqa: PLC0415

    write_hf_layout(gguf_path, hf_dir)
    # NOTE: float32 scales and activations: MLX's CPU kernels emulate bfloat16, which
    # makes a 4-bit matmul with bfloat16 scales about seven times slower here. On
    # Apple GPUs bfloat16 is native; a user's mlx-community model keeps its own dtype.
    convert(str(hf_dir), str(mlx_dir), quantize=True, q_bits=bits, q_group_size=64, dtype=dtype)


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(
            "usage: python -m skulk_daemon.models.gguf_to_hf GGUF HF_DIR MLX_DIR BITS",
            file=sys.stderr,
        )
        return 2
    try:
        convert_to_mlx(Path(argv[0]), Path(argv[1]), Path(argv[2]), bits=int(argv[3]))
    except ConversionError as exc:
        print(f"cannot convert: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
