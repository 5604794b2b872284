"""A small image model built on this machine, in a real stable-diffusion.cpp layout.

No weights can be downloaded here, so the image pipeline's tests, benchmark and demo
run on a model written locally: the tensors of SDXS-512-DS (stable-diffusion.cpp's
smallest UNet architecture: CLIP ViT-L/14 text encoder, the three-level "tiny" UNet
without a middle block, and the TAESD tiny autoencoder, which SDXS always decodes
with) with seeded random weights. stable-diffusion.cpp recognises the version from
the tensor names and shapes and loads it through its normal path; the pictures are
noise, but every byte of the way (text encoder, sampler, UNet, autoencoder, encoder
for edits) is the real engine's.

The large 2-D weights are stored as ``Q4_0`` (random nibbles with a small scale, so
nothing needs quantizing), convolution kernels as ``F16`` and norms and biases as
``F32``, the types stable-diffusion.cpp's own converter leaves them in: the model is
about 300 MB, built in seconds. The names and shapes follow stable-diffusion.cpp's
``unet.hpp``, ``clip.hpp``, ``common_block.hpp`` and ``tae.hpp``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import numpy as np

MODEL_FILE: Final = "sdxs-tiny.gguf"
TAESD_FILE: Final = "taesd.gguf"
NATIVE_SIZE: Final = 512
"""SDXS-512's trained canvas (the tiny model renders any multiple of 64)."""
SEED: Final = 20_261_206

MODEL_CHANNELS: Final = 320
TIME_EMBED: Final = 1280
CONTEXT: Final = 768
HEADS: Final = 8
CLIP_LAYERS: Final = 12
CLIP_VOCAB: Final = 49_408
CLIP_POSITIONS: Final = 77
CLIP_FF: Final = 3072
QK4_0: Final = 32
"""Values per ``Q4_0`` block (an F16 scale and 16 bytes of nibbles)."""

Shape = tuple[int, ...]


def _linear(name: str, into: int, out: int, *, bias: bool = True) -> Iterator[tuple[str, Shape]]:
    yield f"{name}.weight", (out, into)
    if bias:
        yield f"{name}.bias", (out,)


def _conv(
    name: str, into: int, out: int, kernel: int = 3, *, bias: bool = True
) -> Iterator[tuple[str, Shape]]:
    yield f"{name}.weight", (out, into, kernel, kernel)
    if bias:
        yield f"{name}.bias", (out,)


def _norm(name: str, channels: int) -> Iterator[tuple[str, Shape]]:
    yield f"{name}.weight", (channels,)
    yield f"{name}.bias", (channels,)


def _resblock(name: str, into: int, out: int) -> Iterator[tuple[str, Shape]]:
    yield from _norm(f"{name}.in_layers.0", into)
    yield from _conv(f"{name}.in_layers.2", into, out)
    yield from _linear(f"{name}.emb_layers.1", TIME_EMBED, out)
    yield from _norm(f"{name}.out_layers.0", out)
    yield from _conv(f"{name}.out_layers.3", out, out)
    if into != out:
        yield from _conv(f"{name}.skip_connection", into, out, 1)


def _transformer(name: str, channels: int) -> Iterator[tuple[str, Shape]]:
    yield from _norm(f"{name}.norm", channels)
    yield from _conv(f"{name}.proj_in", channels, channels, 1)
    block = f"{name}.transformer_blocks.0"
    for attn, context in (("attn1", channels), ("attn2", CONTEXT)):
        yield from _linear(f"{block}.{attn}.to_q", channels, channels, bias=False)
        yield from _linear(f"{block}.{attn}.to_k", context, channels, bias=False)
        yield from _linear(f"{block}.{attn}.to_v", context, channels, bias=False)
        yield from _linear(f"{block}.{attn}.to_out.0", channels, channels)
    yield from _linear(f"{block}.ff.net.0.proj", channels, channels * 8)  # GEGLU: 2 x 4x
    yield from _linear(f"{block}.ff.net.2", channels * 4, channels)
    for norm in ("norm1", "norm2", "norm3"):
        yield from _norm(f"{block}.{norm}", channels)
    yield from _conv(f"{name}.proj_out", channels, channels, 1)


def unet_tensors(prefix: str = "model.diffusion_model") -> Iterator[tuple[str, Shape]]:
    """SDXS-512-DS's UNet, as ``UnetModelBlock`` lays out a tiny SD1 UNet: channel
    multipliers 1, 2, 4, one res block a level, attention at 2x and 4x down, no middle
    block (which, with no ``output_blocks.7.1``, is how the loader tells it apart)."""
    mults, attention = (1, 2, 4), (4, 2)
    yield from _linear(f"{prefix}.time_embed.0", MODEL_CHANNELS, TIME_EMBED)
    yield from _linear(f"{prefix}.time_embed.2", TIME_EMBED, TIME_EMBED)
    yield from _conv(f"{prefix}.input_blocks.0.0", 4, MODEL_CHANNELS)
    chans, ch, index, ds = [MODEL_CHANNELS], MODEL_CHANNELS, 0, 1
    for level, mult in enumerate(mults):
        index += 1
        yield from _resblock(f"{prefix}.input_blocks.{index}.0", ch, mult * MODEL_CHANNELS)
        ch = mult * MODEL_CHANNELS
        if ds in attention:
            yield from _transformer(f"{prefix}.input_blocks.{index}.1", ch)
        chans.append(ch)
        index += 1  # the tiny UNet skips an index after each res block
        if level != len(mults) - 1:
            index += 1
            yield from _conv(f"{prefix}.input_blocks.{index}.0.op", ch, ch)
            chans.append(ch)
            ds *= 2
    out = 0
    for level in range(len(mults) - 1, -1, -1):
        mult = mults[level]
        for j in range(2):
            skip = chans.pop()
            yield from _resblock(
                f"{prefix}.output_blocks.{out}.0", ch + skip, mult * MODEL_CHANNELS
            )
            ch = mult * MODEL_CHANNELS
            upsample = 1
            if ds in attention:
                yield from _transformer(f"{prefix}.output_blocks.{out}.1", ch)
                upsample = 2
            if level > 0 and j == 1:
                out += 1
                if out == 2:
                    upsample = 1
                yield from _conv(f"{prefix}.output_blocks.{out}.{upsample}.conv", ch, ch)
                ds //= 2
            out += 1
    yield from _norm(f"{prefix}.out.0", MODEL_CHANNELS)
    yield from _conv(f"{prefix}.out.2", MODEL_CHANNELS, 4)


def clip_tensors(
    prefix: str = "cond_stage_model.transformer.text_model",
) -> Iterator[tuple[str, Shape]]:
    """OpenAI CLIP ViT-L/14's text encoder (SD 1.x's)."""
    yield f"{prefix}.embeddings.token_embedding.weight", (CLIP_VOCAB, CONTEXT)
    yield f"{prefix}.embeddings.position_embedding.weight", (CLIP_POSITIONS, CONTEXT)
    for layer in range(CLIP_LAYERS):
        name = f"{prefix}.encoder.layers.{layer}"
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            yield from _linear(f"{name}.self_attn.{proj}", CONTEXT, CONTEXT)
        yield from _norm(f"{name}.layer_norm1", CONTEXT)
        yield from _norm(f"{name}.layer_norm2", CONTEXT)
        yield from _linear(f"{name}.mlp.fc1", CONTEXT, CLIP_FF)
        yield from _linear(f"{name}.mlp.fc2", CLIP_FF, CONTEXT)
    yield from _norm(f"{prefix}.final_layer_norm", CONTEXT)


def _tae_block(name: str, channels: int) -> Iterator[tuple[str, Shape]]:
    for conv in ("conv.0", "conv.2", "conv.4"):
        yield from _conv(f"{name}.{conv}", channels, channels)


def taesd_tensors() -> Iterator[tuple[str, Shape]]:
    """TAESD (``tae.hpp``'s ``TinyEncoder``/``TinyDecoder``: 64 channels, 4 latent)."""
    channels, blocks = 64, 3
    index = 0
    yield from _conv(f"encoder.layers.{index}", 3, channels)
    index += 1
    yield from _tae_block(f"encoder.layers.{index}", channels)
    index += 1
    for _ in range(3):
        yield from _conv(f"encoder.layers.{index}", channels, channels, bias=False)
        index += 1
        for _ in range(blocks):
            yield from _tae_block(f"encoder.layers.{index}", channels)
            index += 1
    yield from _conv(f"encoder.layers.{index}", channels, 4)
    index = 0
    yield from _conv(f"decoder.layers.{index}", 4, channels)
    index += 2  # then a ReLU
    for _ in range(3):
        for _ in range(blocks):
            yield from _tae_block(f"decoder.layers.{index}", channels)
            index += 1
        index += 1  # an Upsample
        yield from _conv(f"decoder.layers.{index}", channels, channels, bias=False)
        index += 1
    yield from _tae_block(f"decoder.layers.{index}", channels)
    index += 1
    yield from _conv(f"decoder.layers.{index}", channels, 3)


def _write(path: Path, tensors: Iterator[tuple[str, Shape]], rng: np.random.Generator) -> None:
    import gguf  # noqa: PLC0415 (only the builder needs it)

    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), arch="skulk-test-image")
    for name, shape in tensors:
        if len(shape) == 1:
            writer.add_tensor(name, _norm_values(name, shape))
        elif len(shape) == 2 and shape[1] % QK4_0 == 0 and "embedding" not in name:
            writer.add_tensor(
                name,
                _q4_0(shape, rng, 0.3 / np.sqrt(shape[1])),
                raw_dtype=gguf.GGMLQuantizationType.Q4_0,
            )
        else:
            fan_in = int(np.prod(shape[1:]))
            weights = rng.standard_normal(shape, dtype=np.float32) / np.sqrt(fan_in)
            writer.add_tensor(name, weights.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with partial.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, path)


def _norm_values(name: str, shape: Shape) -> np.ndarray:
    return (np.ones if name.endswith(".weight") else np.zeros)(shape, dtype=np.float32)


def _q4_0(shape: Shape, rng: np.random.Generator, spread: float) -> np.ndarray:
    """Random ``Q4_0`` blocks: an F16 scale, then 16 bytes of nibbles (values -8..7)."""
    rows, cols = shape
    blocks = rows * cols // QK4_0
    raw = np.empty((blocks, 18), dtype=np.uint8)
    raw[:, :2] = np.frombuffer(np.float16(spread / 4).tobytes(), dtype=np.uint8)
    raw[:, 2:] = rng.integers(0, 256, size=(blocks, 16), dtype=np.uint8)
    return raw.reshape(rows, cols // QK4_0 * 18)


def build(directory: Path, seed: int = SEED) -> Path:
    """Write the model and its autoencoder into ``directory`` (each to a temp file
    renamed into place); returns the model file's path."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    model = directory / MODEL_FILE
    if not model.exists():
        _write(model, _chain(clip_tensors(), unet_tensors()), rng)
    taesd = directory / TAESD_FILE
    if not taesd.exists():
        _write(taesd, taesd_tensors(), rng)
    return model


def _chain(*parts: Iterator[tuple[str, Shape]]) -> Iterator[tuple[str, Shape]]:
    for part in parts:
        yield from part
