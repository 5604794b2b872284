"""The exact-batching rule (pure): where a prompt resumes and how it is batched
so that its cells are what a cold decode writes. The engine tests check the
cells themselves on the real model (``test_prefix_reuse.py``)."""

from __future__ import annotations

import pytest

from skulk_daemon.engines._llama_exact import ExactBatching

RULE = ExactBatching(64, 4, widest=512)


def test_every_batch_is_a_chunk_or_more_and_all_but_the_last_whole_rows() -> None:
    for start in range(0, 600, 4):
        for total in range(start + 64, 1700, 7):
            sizes = list(RULE.batches(start, total))
            assert sum(sizes) == total - start
            assert all(64 <= n <= 512 for n in sizes), (start, total, sizes)
            assert all(n % 4 == 0 for n in sizes[:-1]), (start, total, sizes)


def test_a_span_shorter_than_a_chunk_is_one_batch() -> None:
    assert list(RULE.batches(0, 40)) == [40]
    assert list(RULE.batches(0, 1)) == [1]
    assert list(RULE.batches(5, 5)) == []


def test_the_last_batch_is_never_left_under_a_chunk() -> None:
    # 530 tokens: not 512 + 18, which would decode the last 18 on other kernels.
    assert list(RULE.batches(0, 530)) == [464, 66]
    assert list(RULE.batches(0, 1050)) == [512, 472, 66]
    assert list(RULE.batches(0, 1100)) == [512, 512, 76]


def test_a_prompt_decoded_from_an_exact_start_is_exact_but_for_its_last_rows() -> None:
    assert RULE.exact_after(701) == 700
    assert RULE.exact_after(700) == 700
    assert RULE.exact_after(64) == 64
    assert RULE.exact_after(63) == 0  # one small batch: other kernels throughout


def test_a_prompt_resumes_on_whole_rows_a_chunk_or_more_before_its_end() -> None:
    assert RULE.start(700, 900) == 700
    assert RULE.start(703, 900) == 700
    assert RULE.start(700, 740) == 676  # 64 tokens to decode, not 40
    assert RULE.start(700, 701) == 636
    assert RULE.start(700, 50) == 0
    assert RULE.start(0, 900) == 0


def test_batches_too_narrow_for_two_chunks_make_nothing_exact() -> None:
    narrow = ExactBatching(64, 4, widest=100)
    assert narrow.exact_after(700) == 0 and narrow.start(600, 700) == 0
    sizes = list(narrow.batches(0, 700))
    assert sum(sizes) == 700 and max(sizes) <= 100


def test_a_chunk_must_be_whole_rows() -> None:
    with pytest.raises(ValueError, match="multiple of 4"):
        ExactBatching(30, 4, widest=512)


def test_the_widest_batch_is_whole_rows_too() -> None:
    odd = ExactBatching(64, 4, widest=510)
    assert odd.widest == 508
    assert all(n % 4 == 0 for n in list(odd.batches(0, 1600))[:-1])


def test_a_narrow_rule_still_decodes_every_span() -> None:
    for widest in (64, 100):
        narrow = ExactBatching(64, 4, widest=widest)
        for total in (65, 130, 730):
            sizes = list(narrow.batches(0, total))
            assert sum(sizes) == total and max(sizes) <= widest, (widest, total, sizes)


def _kernels(rule: ExactBatching, start: int, total: int) -> list[tuple[bool, bool]]:
    """For each position from ``start``: (flash attention tiled, GEMM row), the two
    choices llama.cpp's CPU kernels make from a batch's shape."""
    classes: list[tuple[bool, bool]] = []
    for n in rule.batches(start, total):
        classes += [(n >= 64, row < n - n % 4) for row in range(n)]
    return classes


def test_a_warm_prompt_meets_the_kernels_a_cold_one_does() -> None:
    for total in range(1, 1300, 3):
        cold = _kernels(RULE, 0, total)
        exact = RULE.exact_after(total)
        assert all(tiled and gemm for tiled, gemm in cold[:exact])
        for held in range(0, total + 8, 4):
            start = RULE.start(min(held, exact), total)
            assert start <= min(held, exact) and start % 4 == 0
            # Every cell from the resume point on is written as a cold decode writes it.
            assert _kernels(RULE, start, total) == cold[start:], (total, held)
