"""``kv_cache`` and ``flash_attention`` reach llama.cpp's context: a quantized KV
cache holds the same conversation in less memory (what an operator sets it for),
and a combination llama.cpp cannot run is refused before a model is loaded."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest

from skulk_daemon.engines._llama_model import LlamaCppSettings
from tests.engines.demo_model import one_slot

PROMPT = " ".join(f"Entry {i}: the keeper saw {i % 7} ships." for i in range(40))


def _state_bytes(
    path: Path, *, kv_cache: str | None = None, flash_attention: bool | None = None
) -> int:
    """The saved state of one sequence after a cold decode of :data:`PROMPT`."""
    with one_slot(path, 512, kv_cache=kv_cache, flash_attention=flash_attention) as model:
        tokens = model.tokenize(PROMPT)
        token, pos, n_seq_id, seq_id, logits = model.batch_arrays()
        for i, t in enumerate(tokens):
            token[i], pos[i], n_seq_id[i], logits[i] = t, i, 1, i == len(tokens) - 1
            seq_id[i][0] = 0
        assert model.decode(len(tokens)) == 0
        size: int = llama_cpp.llama_state_seq_get_size(model.ctx, 0)
        return size


def test_a_quantized_kv_cache_holds_a_conversation_in_less_memory(demo_gguf: Path) -> None:
    default = _state_bytes(demo_gguf)
    assert _state_bytes(demo_gguf, kv_cache="f16") == default
    q8 = _state_bytes(demo_gguf, kv_cache="q8_0")
    q4 = _state_bytes(demo_gguf, kv_cache="q4_0", flash_attention=True)
    # q8_0 stores 34 bytes a block of 32 values, q4_0 18, against f16's 64.
    assert 0.45 < q8 / default < 0.6, (q8, default)
    assert 0.2 < q4 / default < 0.35, (q4, default)
    # Flash attention off runs with the default cache (the cells' type is unchanged).
    assert _state_bytes(demo_gguf, flash_attention=False) == default


def test_a_combination_llama_cpp_cannot_run_is_refused_up_front(demo_gguf: Path) -> None:
    with pytest.raises(ValueError, match="needs flash attention"):
        LlamaCppSettings(demo_gguf, context_tokens=512, kv_cache="q8_0", flash_attention=False)
    with pytest.raises(ValueError, match="kv_cache must be one of"):
        LlamaCppSettings(demo_gguf, context_tokens=512, kv_cache="q5_1")
