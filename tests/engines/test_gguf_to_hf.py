"""The GGUF reader behind the MLX demo's conversion, on the real demo GGUF."""

from __future__ import annotations

from pathlib import Path

import pytest

from skulk_core.ids import ModelId
from skulk_core.models.cards import AudioCard, Memory, ModelCard
from skulk_core.placement.backends import is_mlx_card
from skulk_daemon.models.gguf_to_hf import ConversionError, GgufFile, hf_config, hf_name


def test_the_demo_gguf_becomes_a_gemma3_text_config(demo_gguf: Path) -> None:
    gguf = GgufFile(demo_gguf)
    config = hf_config(gguf)
    assert config["model_type"] == "gemma3_text"
    assert (config["num_hidden_layers"], config["hidden_size"]) == (18, 640)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 1)
    assert config["vocab_size"] == 262144
    # Every tensor has a Hugging Face name, and no two share one.
    names = [hf_name(tensor.name) for tensor in gguf.tensors]
    assert len(set(names)) == len(names) == len(gguf.tensors)
    assert "model.layers.17.mlp.down_proj.weight" in names


def test_an_unknown_tensor_or_architecture_is_refused() -> None:
    with pytest.raises(ConversionError):
        hf_name("blk.0.ssm_conv1d.weight")


def test_only_mlx_weights_go_to_the_mlx_engine() -> None:
    size = Memory(in_bytes=1)
    gguf = ModelCard(
        model_id=ModelId("a/b-GGUF"), storage_size=size, n_layers=2, gguf_file="b.gguf"
    )
    mlx = ModelCard(
        model_id=ModelId("mlx-community/b-4bit"),
        storage_size=size,
        n_layers=2,
        compatible_backends=("mlx",),
    )
    undeclared = ModelCard(model_id=ModelId("c/d"), storage_size=size, n_layers=2)
    assert not is_mlx_card(gguf)
    assert is_mlx_card(mlx)
    assert is_mlx_card(undeclared)  # safetensors weights: MLX's layout
    speech = ModelCard(
        model_id=ModelId("e/f"),
        storage_size=size,
        n_layers=1,
        audio=AudioCard(kind="stt"),
    )
    assert not is_mlx_card(speech)
