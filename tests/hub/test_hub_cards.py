"""The pure half of bringing your own model: quant grouping, paths, summaries, ranges."""

from __future__ import annotations

import io

import pytest

from skulk_core.models.gguf import read_gguf_header
from skulk_core.models.hub_cards import (
    HubCardError,
    RepoFile,
    card_from_gguf,
    gguf_quants,
    is_safe_repo_path,
    quant_label,
    readme_summary,
    select_quant,
)
from skulk_daemon.hub.ranged import FIRST_BLOCK, RangedReader
from tests.hub.gguf_files import tiny_gguf


def _files(*items: tuple[str, int]) -> list[RepoFile]:
    return [RepoFile(path=path, size=size) for path, size in items]


def test_quants_group_complete_shard_sets_only() -> None:
    listing = _files(
        ("a-Q4_K_M-00001-of-00002.gguf", 10),
        ("a-Q4_K_M-00002-of-00002.gguf", 10),
        ("a-Q8_0-00001-of-00003.gguf", 5),  # shards 2 and 3 missing: not loadable
        ("a-IQ3_XXS.gguf", 7),
        ("a-imatrix.gguf", 1),
        ("mmproj-a-f16.gguf", 1),
        ("a-draft-Q4_0.gguf", 1),
    )
    quants = gguf_quants(listing)
    assert [(q.label, q.total_bytes, q.shard_count) for q in quants] == [
        ("IQ3_XXS", 7, 1),
        ("Q4_K_M", 20, 2),
    ]
    assert select_quant(quants, None) == quants[1]  # Q4_K_M is preferred over smaller
    assert select_quant(quants, "a-IQ3_XXS.gguf") == quants[0]
    with pytest.raises(HubCardError, match="later shard"):
        select_quant(quants, "a-Q4_K_M-00002-of-00002.gguf")
    with pytest.raises(HubCardError, match="not a GGUF weight file"):
        select_quant(quants, "a-Q8_0-00001-of-00003.gguf")
    assert select_quant([], None) is None


@pytest.mark.parametrize(
    ("name", "label"),
    [("x-Q4_K_M.gguf", "Q4_K_M"), ("x.BF16.gguf", "BF16"), ("plain.gguf", "plain")],
)
def test_quant_labels(name: str, label: str) -> None:
    assert quant_label(name) == label


@pytest.mark.parametrize(
    ("path", "safe"),
    [
        ("model.gguf", True),
        ("sub/dir/model.gguf", True),
        ("../model.gguf", False),
        ("sub/../../model.gguf", False),
        ("/etc/passwd", False),
        ("sub//model.gguf", False),
        ("C:/model.gguf", False),
        ("a\\..\\b.gguf", False),
    ],
)
def test_repo_paths(path: str, safe: bool) -> None:
    assert is_safe_repo_path(path) is safe


def test_summary_keeps_prose_and_bounds_it() -> None:
    readme = "---\nlicense: mit\n---\n# Title\n\n```py\ncode()\n```\n\n" + "word " * 400
    summary = readme_summary(readme)
    assert summary.startswith("word word")
    assert len(summary) <= 600 and summary.endswith("…")
    assert readme_summary("# only a heading\n\n| a | b |") == ""


def test_the_header_is_read_through_bounded_ranges() -> None:
    data = tiny_gguf(filler=4 * 1024 * 1024)
    asked: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        asked.append((start, end))
        return data[start : end + 1]

    reader = RangedReader(fetch, size=len(data))
    header = read_gguf_header(reader)  # type: ignore[arg-type]
    assert header.block_count == 2
    assert asked == [(0, FIRST_BLOCK - 1)]
    assert reader.fetched == FIRST_BLOCK < len(data)
    card = card_from_gguf(
        model_id="o/m",
        header=header,
        gguf_file="m.gguf",
        storage_bytes=len(data),
        source_repository="o/m",
        source_revision="a" * 40,
    )
    assert (card.n_layers, card.num_key_value_heads, card.head_dim) == (2, 2, 16)
    assert card.quantization == "Q4_K_M"
    assert card.display_name == "Tiny Test"


def test_a_header_that_is_not_gguf_is_refused() -> None:
    from skulk_core.models.gguf import GgufError  # noqa: PLC0415

    with pytest.raises(GgufError):
        read_gguf_header(io.BytesIO(b"NOPE" + bytes(64)))
