"""Convert a Hugging Face BERT sentence-embedding model (safetensors) to a llama.cpp GGUF.

It writes what llama.cpp's ``convert_hf_to_gguf.py`` writes for ``BertModel``
(architecture ``bert``, its tensor names, hparams, pooling from the
sentence-transformers ``Pooling`` module, and the WordPiece vocabulary in
llama.cpp's phantom-space form), without torch or transformers: the safetensors
file is memory-mapped with numpy and every weight is written as F32, so the
GGUF computes what the checkpoint computes.

The output is deterministic (same input, same bytes) and written atomically:
a temp file beside the target, fsync, rename.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import gguf
import numpy as np
import numpy.typing as npt

from skulk_daemon.models.packaged import PARTIAL_SUFFIX
from skulk_host.fsutil import fsync_dir

SAFETENSORS_FILE: Final = "model.safetensors"
CONFIG_FILE: Final = "config.json"
VOCAB_FILE: Final = "vocab.txt"
TOKENIZER_FILE: Final = "tokenizer.json"
TOKENIZER_CONFIG_FILE: Final = "tokenizer_config.json"
MODULES_FILE: Final = "modules.json"
GGUF_FILE_MODE: Final = 0o644

# The safetensors format caps its JSON header at 100 MB; configs and tokenizers of
# real models are well under 16 MiB.
MAX_SAFETENSORS_HEADER_BYTES: Final = 100 * 1000 * 1000
MAX_JSON_FILE_BYTES: Final = 16 * 1024 * 1024
MAX_VOCAB_FILE_BYTES: Final = 16 * 1024 * 1024

# llama.cpp's WordPiece marks the start of a word with U+2581 and stores
# continuation pieces ("##ing") without their prefix.
PHANTOM_SPACE: Final = "\u2581"
# llama.cpp reads these (BertNormalizer options); gguf-py names them only in newer releases.
NORMALIZER_LOWERCASE_KEY: Final = "tokenizer.ggml.normalizer.lowercase"
NORMALIZER_STRIP_ACCENTS_KEY: Final = "tokenizer.ggml.normalizer.strip_accents"
CONTINUATION_PREFIX: Final = "##"

# Checkpoint tensors the embedding graph never reads: the position-id buffer, the
# next-sentence pooler and the masked-LM heads (as llama.cpp's converter drops them).
_UNUSED_TENSORS: Final = ("embeddings.position_ids",)
_UNUSED_PREFIXES: Final = ("pooler.", "cls.")

_POOLING_MODES: Final = (
    ("pooling_mode_mean_tokens", gguf.PoolingType.MEAN),
    ("pooling_mode_cls_token", gguf.PoolingType.CLS),
    ("pooling_mode_lasttoken", gguf.PoolingType.LAST),
)
_SPECIAL_TOKENS: Final = {
    "cls": "[CLS]",
    "sep": "[SEP]",
    "unk": "[UNK]",
    "pad": "[PAD]",
    "mask": "[MASK]",
}


class BertConversionError(ValueError):
    """The model directory is not a BERT embedding model this converter handles."""


@dataclass(frozen=True, slots=True)
class BertHparams:
    n_layers: int
    hidden_size: int
    intermediate_size: int
    n_heads: int
    context_length: int
    layer_norm_eps: float
    type_vocab_size: int
    vocab_size: int


@dataclass(frozen=True, slots=True)
class WordPieceVocab:
    """The vocabulary as llama.cpp wants it, and the ids of the special tokens."""

    tokens: list[str]
    token_types: list[int]
    special: dict[str, int]
    lowercase: bool
    strip_accents: bool | None


def convert_bert_to_gguf(
    model_dir: Path, target: Path, *, name: str, license_id: str | None = None
) -> None:
    """Write ``model_dir`` (a sentence-transformers BERT) as a GGUF at ``target``.

    Raises :class:`BertConversionError` when the directory is not a BERT model with
    a pooling config, its tensors do not match the config, or a file is malformed;
    ``target`` is then left as it was.
    """
    hparams = read_hparams(_read_json(model_dir / CONFIG_FILE))
    pooling = read_pooling(model_dir)
    vocab = read_vocab(model_dir, hparams.vocab_size)
    tensors = gguf_tensors(read_safetensors(model_dir / SAFETENSORS_FILE), hparams)
    _write_atomically(
        target,
        lambda path: _write_gguf(
            path,
            name=name,
            license_id=license_id,
            hparams=hparams,
            pooling=pooling,
            vocab=vocab,
            tensors=tensors,
        ),
    )


# -- config ------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_JSON_FILE_BYTES + 1)
    except OSError as exc:
        raise BertConversionError(f"cannot read {path.name}: {exc}") from None
    if len(data) > MAX_JSON_FILE_BYTES:
        raise BertConversionError(f"{path.name} is larger than {MAX_JSON_FILE_BYTES} bytes")
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise BertConversionError(f"{path.name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BertConversionError(f"{path.name} does not hold a JSON object")
    return value


def _positive_int(config: Mapping[str, object], key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BertConversionError(f"{CONFIG_FILE}: {key} must be a positive integer")
    return value


def read_hparams(config: Mapping[str, object]) -> BertHparams:
    if config.get("model_type") != "bert":
        raise BertConversionError(f"{CONFIG_FILE}: model_type is not 'bert'")
    if config.get("hidden_act", "gelu") != "gelu":
        raise BertConversionError(f"{CONFIG_FILE}: only the GELU activation is supported")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise BertConversionError(f"{CONFIG_FILE}: only absolute position embeddings work")
    eps = config.get("layer_norm_eps", 1e-12)
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps > 0:
        raise BertConversionError(f"{CONFIG_FILE}: layer_norm_eps must be a positive number")
    hidden = _positive_int(config, "hidden_size")
    heads = _positive_int(config, "num_attention_heads")
    if hidden % heads:
        raise BertConversionError(f"{CONFIG_FILE}: hidden_size is not a multiple of the heads")
    return BertHparams(
        n_layers=_positive_int(config, "num_hidden_layers"),
        hidden_size=hidden,
        intermediate_size=_positive_int(config, "intermediate_size"),
        n_heads=heads,
        context_length=_positive_int(config, "max_position_embeddings"),
        layer_norm_eps=float(eps),
        type_vocab_size=_positive_int(config, "type_vocab_size"),
        vocab_size=_positive_int(config, "vocab_size"),
    )


def read_pooling(model_dir: Path) -> gguf.PoolingType:
    """The pooling of the sentence-transformers ``Pooling`` module (``modules.json``)."""
    modules_path = model_dir / MODULES_FILE
    try:
        modules = json.loads(modules_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BertConversionError(f"cannot read {MODULES_FILE}: {exc}") from None
    paths = [
        module.get("path")
        for module in modules
        if isinstance(module, dict) and str(module.get("type", "")).endswith(".Pooling")
    ]
    if not paths or not isinstance(paths[0], str):
        raise BertConversionError(f"{MODULES_FILE} names no Pooling module")
    pooling_dir = (model_dir / paths[0]).resolve()
    if not pooling_dir.is_relative_to(model_dir.resolve()):
        raise BertConversionError(f"{MODULES_FILE}: the Pooling path leaves the model dir")
    config = _read_json(pooling_dir / CONFIG_FILE)
    for key, pooling in _POOLING_MODES:
        if config.get(key) is True:
            return pooling
    raise BertConversionError("only mean, CLS and last-token pooling are supported")


# -- vocabulary --------------------------------------------------------------------


def phantom_space(token: str, *, control: bool) -> str:
    """A WordPiece token in llama.cpp's form: ``##ing`` → ``ing``, ``cat`` → ``▁cat``."""
    if control:
        return token
    if token.startswith(CONTINUATION_PREFIX):
        return token[len(CONTINUATION_PREFIX) :]
    return PHANTOM_SPACE + token


def _token_name(value: object, default: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return default


def read_vocab(model_dir: Path, vocab_size: int) -> WordPieceVocab:
    path = model_dir / VOCAB_FILE
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_VOCAB_FILE_BYTES + 1)
    except OSError as exc:
        raise BertConversionError(f"cannot read {VOCAB_FILE}: {exc}") from None
    if len(raw) > MAX_VOCAB_FILE_BYTES:
        raise BertConversionError(f"{VOCAB_FILE} is larger than {MAX_VOCAB_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BertConversionError(f"{VOCAB_FILE} is not UTF-8") from None
    # NOTE: split on "\n" only, as BERT's loader does; str.splitlines() would also
    # split on U+2028 and friends, which are tokens in some vocabularies.
    words = text.split("\n")
    if words and words[-1] == "":
        words.pop()
    words = [word.removesuffix("\r") for word in words]
    if len(words) != vocab_size:
        raise BertConversionError(
            f"{VOCAB_FILE} has {len(words)} tokens, {CONFIG_FILE} says {vocab_size}"
        )
    ids = {word: index for index, word in enumerate(words)}
    if len(ids) != len(words):
        raise BertConversionError(f"{VOCAB_FILE} repeats a token")

    tokenizer = _read_json(model_dir / TOKENIZER_FILE)
    tokenizer_config = _read_json(model_dir / TOKENIZER_CONFIG_FILE)
    added = tokenizer.get("added_tokens", [])
    control = {
        entry["id"]
        for entry in (added if isinstance(added, list) else [])
        if isinstance(entry, dict)
        and entry.get("special") is True
        and isinstance(entry.get("id"), int)
    }
    special: dict[str, int] = {}
    for kind, default in _SPECIAL_TOKENS.items():
        name = _token_name(tokenizer_config.get(f"{kind}_token"), default)
        if name not in ids:
            raise BertConversionError(f"the {kind} token {name!r} is not in {VOCAB_FILE}")
        special[kind] = ids[name]
        control.add(ids[name])

    normalizer = tokenizer.get("normalizer") or {}
    lowercase = tokenizer_config.get("do_lower_case", True)
    strip_accents = tokenizer_config.get("strip_accents")
    if isinstance(normalizer, dict) and normalizer.get("type") == "BertNormalizer":
        lowercase = normalizer.get("lowercase", lowercase)
        strip_accents = normalizer.get("strip_accents", strip_accents)
    if not isinstance(lowercase, bool) or not isinstance(strip_accents, bool | None):
        raise BertConversionError("the tokenizer's lowercase/strip_accents are not booleans")

    types = [
        gguf.TokenType.CONTROL if index in control else gguf.TokenType.NORMAL
        for index in range(len(words))
    ]
    return WordPieceVocab(
        tokens=[
            phantom_space(word, control=kind == gguf.TokenType.CONTROL)
            for word, kind in zip(words, types, strict=True)
        ],
        token_types=[int(kind) for kind in types],
        special=special,
        lowercase=lowercase,
        strip_accents=strip_accents,
    )


# -- tensors -----------------------------------------------------------------------


def _f32(raw: npt.NDArray[np.uint8], dtype: str, shape: list[int]) -> npt.NDArray[np.float32]:
    if dtype == "F32":
        return raw.view("<f4").reshape(shape)
    if dtype == "F16":
        return raw.view("<f2").astype(np.float32).reshape(shape)
    if dtype == "BF16":
        # bfloat16 is the top half of a float32.
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    raise BertConversionError(f"unsupported safetensors dtype {dtype}")


_ITEM_BYTES: Final = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4}


def read_safetensors(path: Path) -> dict[str, npt.NDArray[np.float32]]:
    """Every floating-point tensor in a safetensors file, as F32 arrays (memory-mapped
    where the file already holds F32). Integer buffers are left out."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise BertConversionError(f"{path.name} is truncated")
            (header_length,) = struct.unpack("<Q", prefix)
            if header_length > min(MAX_SAFETENSORS_HEADER_BYTES, size - 8):
                raise BertConversionError(f"{path.name} has an impossible header length")
            header = json.loads(handle.read(header_length))
    except OSError as exc:
        raise BertConversionError(f"cannot read {path.name}: {exc}") from None
    except ValueError as exc:
        raise BertConversionError(f"{path.name} has a malformed header: {exc}") from None
    if not isinstance(header, dict):
        raise BertConversionError(f"{path.name} has a malformed header")
    data_start = 8 + header_length
    data: npt.NDArray[np.uint8] = np.memmap(path, dtype=np.uint8, mode="r", offset=data_start)
    tensors: dict[str, npt.NDArray[np.float32]] = {}
    for tensor_name, info in header.items():
        if tensor_name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise BertConversionError(f"{path.name}: bad entry for {tensor_name}") from None
        if not all(type(n) is int and n >= 0 for n in (begin, end, *shape)):
            raise BertConversionError(f"{path.name}: bad offsets or shape for {tensor_name}")
        if dtype not in _ITEM_BYTES:
            raise BertConversionError(f"{path.name}: {tensor_name} has unsupported dtype {dtype}")
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(data) or end - begin != count * _ITEM_BYTES[dtype]:
            raise BertConversionError(f"{path.name}: {tensor_name} lies outside the file")
        if dtype in ("I64", "I32"):
            continue
        tensors[tensor_name] = _f32(data[begin:end], dtype, shape)
    return tensors


def expected_shapes(hparams: BertHparams) -> dict[str, tuple[int, ...]]:
    """The GGUF tensors llama.cpp's BERT graph loads, with their numpy (row-major) shapes."""
    hidden, ff = hparams.hidden_size, hparams.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (hparams.vocab_size, hidden),
        "token_types.weight": (hparams.type_vocab_size, hidden),
        "position_embd.weight": (hparams.context_length, hidden),
        "token_embd_norm.weight": (hidden,),
        "token_embd_norm.bias": (hidden,),
    }
    for block in range(hparams.n_layers):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            shapes[f"blk.{block}.{part}.weight"] = (hidden, hidden)
            shapes[f"blk.{block}.{part}.bias"] = (hidden,)
        shapes[f"blk.{block}.ffn_up.weight"] = (ff, hidden)
        shapes[f"blk.{block}.ffn_up.bias"] = (ff,)
        shapes[f"blk.{block}.ffn_down.weight"] = (hidden, ff)
        shapes[f"blk.{block}.ffn_down.bias"] = (hidden,)
        for norm in ("attn_output_norm", "layer_output_norm"):
            shapes[f"blk.{block}.{norm}.weight"] = (hidden,)
            shapes[f"blk.{block}.{norm}.bias"] = (hidden,)
    return shapes


def gguf_tensors(
    source: Mapping[str, npt.NDArray[np.float32]], hparams: BertHparams
) -> list[tuple[str, npt.NDArray[np.float32]]]:
    """The checkpoint's tensors under llama.cpp's names, in llama.cpp's expected set.

    Names come from ``gguf.TensorNameMap`` (the converter's own table). A Linear
    weight is ``[out, in]`` in both PyTorch and GGUF's numpy view, so nothing is
    transposed. Order follows the checkpoint, so the output is deterministic.
    """
    names = gguf.TensorNameMap(gguf.MODEL_ARCH.BERT, hparams.n_layers)
    expected = expected_shapes(hparams)
    mapped: list[tuple[str, npt.NDArray[np.float32]]] = []
    unknown: list[str] = []
    for source_name, array in source.items():
        name = source_name.removeprefix("bert.")
        if name in _UNUSED_TENSORS or name.startswith(_UNUSED_PREFIXES):
            continue
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None or target not in expected:
            unknown.append(source_name)
            continue
        if tuple(array.shape) != expected[target]:
            raise BertConversionError(
                f"{source_name} has shape {tuple(array.shape)}, expected {expected[target]}"
            )
        mapped.append((target, array))
    if unknown:
        raise BertConversionError(f"tensors this converter does not know: {', '.join(unknown)}")
    missing = sorted(set(expected) - {name for name, _ in mapped})
    if missing:
        raise BertConversionError(f"the checkpoint lacks {', '.join(missing)}")
    if len(mapped) != len(expected):
        raise BertConversionError("the checkpoint holds a tensor twice")
    return mapped


# -- writing -----------------------------------------------------------------------


def _write_gguf(
    path: Path,
    *,
    name: str,
    license_id: str | None,
    hparams: BertHparams,
    pooling: gguf.PoolingType,
    vocab: WordPieceVocab,
    tensors: list[tuple[str, npt.NDArray[np.float32]]],
) -> None:
    writer = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    writer.add_name(name)
    if license_id is not None:
        writer.add_license(license_id)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(hparams.context_length)
    writer.add_embedding_length(hparams.hidden_size)
    writer.add_feed_forward_length(hparams.intermediate_size)
    writer.add_block_count(hparams.n_layers)
    writer.add_head_count(hparams.n_heads)
    writer.add_layer_norm_eps(hparams.layer_norm_eps)
    writer.add_causal_attention(False)
    writer.add_pooling_type(pooling)

    writer.add_tokenizer_model("bert")
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    writer.add_token_type_count(hparams.type_vocab_size)
    # As llama.cpp's converter: [CLS] doubles as BOS and [SEP] as EOS, and the
    # tokenizer wraps every input in them.
    writer.add_bos_token_id(vocab.special["cls"])
    writer.add_eos_token_id(vocab.special["sep"])
    writer.add_sep_token_id(vocab.special["sep"])
    writer.add_unk_token_id(vocab.special["unk"])
    writer.add_pad_token_id(vocab.special["pad"])
    writer.add_mask_token_id(vocab.special["mask"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)
    writer.add_bool(NORMALIZER_LOWERCASE_KEY, vocab.lowercase)
    if vocab.strip_accents is not None:
        writer.add_bool(NORMALIZER_STRIP_ACCENTS_KEY, vocab.strip_accents)

    for tensor_name, array in tensors:
        writer.add_tensor(tensor_name, array)
    writer.write_header_to_file(path=path)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=PARTIAL_SUFFIX
    )
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with tmp.open("rb") as handle:
            os.fsync(handle.fileno())
        tmp.chmod(GGUF_FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    fsync_dir(target.parent)
