"""``LlamaModel.logits``: the decode step reads each row's logits through a numpy view
kept per buffer address, not a new ctypes array every token. The view must show
what llama.cpp's own accessor shows, row by row and decode after decode."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from skulk_daemon.engines._llama_model import LlamaCppSettings, LlamaModel
from tests.engines.demo_model import TEST_THREADS


@pytest.fixture(scope="module")
def model(demo_gguf: Path) -> Iterator[LlamaModel]:
    opened = LlamaModel.open(
        LlamaCppSettings(demo_gguf, context_tokens=128, slots=2, n_threads=TEST_THREADS)
    )
    try:
        yield opened
    finally:
        opened.close()


def _accessor(model: LlamaModel, row: int) -> np.ndarray:
    pointer = llama_cpp.llama_get_logits_ith(model.ctx, row)
    return np.ctypeslib.as_array(pointer, shape=(model.n_vocab,)).copy()


def _step(model: LlamaModel, tokens: list[int], pos: int) -> None:
    """One decode carrying ``tokens[i]`` at ``pos`` in sequence ``i``, logits for each."""
    token, positions, n_seq_id, seq_id, logits = model.batch_arrays()
    for i, t in enumerate(tokens):
        token[i], positions[i], n_seq_id[i], logits[i] = t, pos, 1, 1
        seq_id[i][0] = i
    assert model.decode(len(tokens)) == 0


def test_each_row_reads_what_llama_cpp_gives_decode_after_decode(model: LlamaModel) -> None:
    model.forget(0)
    model.forget(1)
    prompt = model.tokenize("The lighthouse keeper counted the ships")
    seen: list[np.ndarray] = []
    for pos, token in enumerate(prompt):
        _step(model, [token, prompt[-1 - pos]], pos)
        for row in (0, 1):
            view = model.logits(row)
            assert view.shape == (model.n_vocab,)
            assert np.array_equal(view, _accessor(model, row))
        seen.append(model.logits(0).copy())
    # The rows really moved from step to step (a stale view would repeat one).
    assert not np.array_equal(seen[0], seen[-1])


def test_a_row_that_asked_for_no_logits_is_refused(model: LlamaModel) -> None:
    model.forget(0)
    prompt = model.tokenize("Two seals and a boat")
    model.fill_span(prompt, 0, len(prompt), 0, last_logits=True)
    assert model.decode(len(prompt)) == 0
    assert int(model.logits(len(prompt) - 1).argmax()) == int(
        _accessor(model, len(prompt) - 1).argmax()
    )
    with pytest.raises(RuntimeError, match="no logits for batch row 0"):
        model.logits(0)
