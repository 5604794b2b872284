"""The premise of ``_llama_exact``, on the real model and llama.cpp's own kernels:
how a prompt is split into batches changes its cells, except between splits the
rule treats alike (every batch at least 64 tokens, all but the last whole rows of
4). If a llama.cpp upgrade changes how its CPU kernels pick by batch shape, this
is the test that says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from skulk_daemon.engines._llama_model import LlamaModel
from tests.engines.demo_model import one_slot

pytestmark = pytest.mark.slow


class Decoder:
    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        text = " ".join(
            f"Entry {i}: the keeper saw {i % 7} ships and {i % 3} seals." for i in range(80)
        )
        self.tokens = model.tokenize(text)[:801]
        assert len(self.tokens) == 801

    def run(self, batches: list[int], *, start: int = 0, seq: int = 0) -> np.ndarray:
        """Decode ``tokens[start:]`` in ``batches`` into ``seq``; the last logits."""
        model = self.model
        token, pos, n_seq_id, seq_id, logits = model.batch_arrays()
        for n in batches:
            for i in range(n):
                token[i] = self.tokens[start + i]
                pos[i] = start + i
                n_seq_id[i] = 1
                seq_id[i][0] = seq
                logits[i] = i == n - 1
            assert model.decode(n) == 0
            start += n
        row = llama_cpp.llama_get_logits_ith(model.ctx, batches[-1] - 1)
        return np.ctypeslib.as_array(row, shape=(model.n_vocab,)).copy()

    def cold(self, batches: list[int]) -> np.ndarray:
        self.model.forget(0)
        return self.run(batches)


@pytest.fixture(scope="module")
def decoder(demo_gguf: Path) -> Iterator[Decoder]:
    with one_slot(demo_gguf, 1024) as model:
        yield Decoder(model)


def test_splits_the_rule_treats_alike_give_identical_logits(decoder: Decoder) -> None:
    reference = decoder.cold([512, 189])
    for batches in ([100, 400, 201], [300, 401], [436, 265]):
        assert np.array_equal(decoder.cold(batches), reference), batches


def test_a_batch_keeps_its_leading_rows_exact_not_its_last_few(decoder: Decoder) -> None:
    reference = decoder.cold([512, 189])  # 701 cells; the last (701 % 4 = 1) from the GEMV
    assert decoder.model.keep_prefix(0, 700)
    resumed = decoder.run([101], start=700)
    assert np.array_equal(resumed, decoder.cold([512, 188, 101]))
    # The split matters where the rule says it does: a one-token last batch, or a
    # last batch under 64 tokens, rounds differently.
    assert not np.array_equal(decoder.cold([512, 188, 1]), reference)
    assert not np.array_equal(decoder.cold([512, 129, 60]), reference)


@pytest.mark.parametrize(
    ("kv_cache", "flash_attention"), [(None, False), ("q8_0", None)], ids=["fa-off", "kv-q8_0"]
)
def test_the_rule_holds_with_flash_attention_off_and_a_quantized_cache(
    demo_gguf: Path, kv_cache: str | None, flash_attention: bool | None
) -> None:
    # The bit-exact mode runs under every inference.kv_cache_backend and
    # inference.flash_attention; the splits it treats alike must agree under each.
    # (A quantized cache may also absorb the rounding a one-row batch differs by, so
    # only the agreement is asserted here.)
    with one_slot(demo_gguf, 1024, kv_cache=kv_cache, flash_attention=flash_attention) as model:
        decoder = Decoder(model)
        reference = decoder.cold([512, 189])
        for batches in ([100, 400, 201], [436, 265]):
            assert np.array_equal(decoder.cold(batches), reference), batches
        assert model.keep_prefix(0, 700)
        assert np.array_equal(decoder.run([101], start=700), decoder.cold([512, 188, 101]))
