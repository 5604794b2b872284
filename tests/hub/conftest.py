"""Fixtures for the hub suites: the demo GGUF, seeded models dirs, the fake hub's repos.

Each suite gets its own models dir, so what it downloads or imports never shows up
in another suite's catalog. The dir is seeded with hard links to the demo models the
session already installed, so no node here assembles or hashes them again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from skulk_daemon.models.embedding_demo import with_embedding_demo
from skulk_daemon.models.installed import load_installed_models
from tests.hub.fake_hub import HubFile, HubRepo
from tests.hub.gguf_files import tiny_gguf

TINY = "test-org/tiny-GGUF"
TINY_LLM = "test-org/tiny-llm"
GATED = "test-org/gated-GGUF"
ESCAPE = "evil-org/escape-GGUF"
MLX = "mlx-community/tiny-4bit"
DEMO_REPO = "test-org/gemma-3-270m-GGUF"

README = """---
license: apache-2.0
---
# Tiny

![logo](logo.png)

A **tiny** model for tests, made of [GGUF](https://example.invalid) headers and filler.

| a | b |
|---|---|

It answers nothing useful.
"""


@pytest.fixture(scope="session")
def demo_gguf(shared_models_dir: Path) -> Path:
    """The demo GGUF, as the session's nodes install it into the shared models dir."""
    installed = load_installed_models(shared_models_dir)
    with_embedding_demo(installed, shared_models_dir)
    demo = next(m for m in installed if m.card.model_id == "local/gemma-3-270m-q4_k_m")
    assert demo.card.gguf_file is not None
    return Path(demo.location) / demo.card.gguf_file


def seed_models_dir(target: Path, shared: Path) -> Path:
    """``target`` holding hard links to every installed model under ``shared``."""
    for source in shared.rglob("*"):
        if not source.is_file() or source.name == "install.lock":
            continue
        dest = target / source.relative_to(shared)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.link(source, dest)
    return target


@pytest.fixture(scope="module")
def models_dir(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path, demo_gguf: Path
) -> Path:
    return seed_models_dir(tmp_path_factory.mktemp("hub-models"), shared_models_dir)


def standard_repos(demo_gguf: Path | None = None) -> list[HubRepo]:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 128,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
    }
    repos = [
        HubRepo(
            TINY,
            {
                "README.md": HubFile(README.encode()),
                "tiny-Q4_K_M.gguf": HubFile(tiny_gguf(filler=2 * 1024 * 1024)),
                "tiny-Q8_0.gguf": HubFile(tiny_gguf(file_type=7, filler=3 * 1024 * 1024)),
                "split/tiny-Q2_K-00001-of-00002.gguf": HubFile(tiny_gguf(file_type=10)),
                "split/tiny-Q2_K-00002-of-00002.gguf": HubFile(bytes(32 * 1024)),
                "mmproj-tiny-F16.gguf": HubFile(tiny_gguf(file_type=1, filler=1024)),
            },
            downloads=50,
            trending_score=5,
            library_name="gguf",
            tags=("gguf", "base_model:quantized:test-org/tiny", "arxiv:2401.00001", "en"),
            card_data={"license": "apache-2.0", "language": ["en", "fr"]},
            gguf={"total": 123456, "architecture": "llama", "context_length": 2048},
        ),
        HubRepo(
            TINY_LLM,
            {
                "config.json": HubFile(json.dumps(config).encode()),
                "model.safetensors": HubFile(bytes(20 * 1024)),
                "tokenizer.json": HubFile(b"{}"),
            },
            downloads=40,
            trending_score=50,
            library_name="transformers",
            safetensors={"parameters": {"BF16": 999}, "total": 999},
        ),
        HubRepo(GATED, {"gated-Q4_K_M.gguf": HubFile(tiny_gguf())}, gated=True, downloads=3),
        HubRepo(
            ESCAPE,
            {"../../escape-Q4_K_M.gguf": HubFile(tiny_gguf()), "ok-Q4_K_M.gguf": HubFile(b"x")},
        ),
        HubRepo(MLX, {"config.json": HubFile(json.dumps(config).encode())}, downloads=1),
    ]
    if demo_gguf is not None:
        repos.append(HubRepo(DEMO_REPO, {demo_gguf.name: HubFile(demo_gguf)}, library_name="gguf"))
    return repos
