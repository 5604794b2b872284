"""Hugging Face discovery, add, download and import through the real app, in process.

One app for the module, pointed at a fake hub on loopback through ``HF_ENDPOINT``
(``tests/hub/fake_hub.py`` speaks what ``huggingface-hub`` really calls). Every
refusal the spec names is asked for here: gated 401/403 with the fix, an unknown
repository, a revision that is not 40 hex, a GGUF pin naming no file, a path
escaping the model directory in a listing or a model id, model ids with a raw ``/``.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skulk_core.steward.evidence import node_names
from skulk_daemon.hub import download
from skulk_daemon.steward.proposals import ProposalBook
from tests.api.in_process import AppNode
from tests.hub.conftest import ESCAPE, GATED, MLX, TINY, TINY_LLM, standard_repos
from tests.hub.fake_hub import FakeHub, HubFile, pointed_at
from tests.hub.gguf_files import tiny_gguf

KNOWN_TOKEN = "hf_knownbutnotaccepted0000000000"
GOOD_TOKEN = "hf_acceptedtheterms000000000000"


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    with (
        FakeHub(
            standard_repos(),
            authorized_tokens=frozenset({GOOD_TOKEN}),
            known_tokens=frozenset({KNOWN_TOKEN}),
        ) as served,
        pointed_at(served),
    ):
        yield served


@pytest.fixture(scope="module")
def app(
    hub: FakeHub, tmp_path_factory: pytest.TempPathFactory, models_dir: Path
) -> Iterator[AppNode]:
    with AppNode(root=tmp_path_factory.mktemp("hub-app"), models_dir=models_dir) as node:
        yield node


@pytest.fixture(autouse=True)
def _no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)


def error(response: Any) -> str:
    message: str = response.json()["error"]["message"]
    return message


def add(app: AppNode, **body: Any) -> Any:
    return app.post("/models/add", json=body, timeout=60)


# -- search, quants, summaries -------------------------------------------------------


def test_search_carries_discovery_metadata_and_pages(app: AppNode) -> None:
    found = app.get("/models/search", params={"query": "tiny"})
    assert found.status_code == 200, found.text
    by_id = {item["id"]: item for item in found.json()}
    assert [item["id"] for item in found.json()][:2] == [TINY, TINY_LLM]  # by downloads
    tiny = by_id[TINY]
    assert tiny["library_name"] == "gguf"
    assert tiny["license"] == "apache-2.0"
    assert tiny["languages"] == ["en", "fr"]
    assert tiny["param_count"] == 123456
    assert tiny["context_length"] == 2048
    assert tiny["architecture"] == "llama"
    assert (tiny["base_model_repo"], tiny["base_model_relation"]) == (
        "test-org/tiny",
        "quantized",
    )
    assert tiny["arxiv_ids"] == ["2401.00001"]
    assert by_id[TINY_LLM]["param_count"] == 999

    second = app.get("/models/search", params={"query": "tiny", "limit": 1, "offset": 1}).json()
    assert [item["id"] for item in second] == [TINY_LLM]
    trending = app.get("/models/search").json()
    assert trending[0]["id"] == TINY_LLM  # empty query: trending first
    mlx = app.get("/models/search", params={"query": "tiny", "mlx_only": "true"}).json()
    assert [item["id"] for item in mlx] == [MLX]
    gated = app.get("/models/search", params={"pipeline_tag": "text-generation", "query": "gated"})
    assert gated.json()[0]["gated"] is True
    none = app.get("/models/search", params={"pipeline_tag": "automatic-speech-recognition"})
    assert none.json() == []
    assert app.get("/models/search", params={"limit": 0}).status_code == 400


def test_search_with_no_reachable_hub_says_so_at_once(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port nothing listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", dead)

    # huggingface-hub's own listing retried for ~24 s; the client gives up well before.
    answer = app.get("/models/search", params={"query": "tiny"}, timeout=10)

    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "hub_unreachable"
    assert f"cannot reach the Hugging Face Hub at {dead}" in error(answer)


def test_search_for_a_gguf_file_name_returns_exact_matches(app: AppNode) -> None:
    found = app.get("/models/search", params={"query": "tiny-Q2_K-00001-of-00002.gguf"})
    assert found.status_code == 200, found.text
    assert [(r["id"], r["matched_file"]) for r in found.json()] == [
        (TINY, "split/tiny-Q2_K-00001-of-00002.gguf")
    ]
    assert found.json()[0]["total_file_size"] > 32 * 1024
    assert app.get("/models/search", params={"query": "absent-Q4_K_M.gguf"}).json() == []


def test_gguf_quants_groups_shards_and_leaves_out_companions(app: AppNode) -> None:
    listed = app.get("/models/gguf-quants", params={"model_id": TINY})
    assert listed.status_code == 200, listed.text
    options = listed.json()["options"]
    assert [(o["label"], o["shard_count"]) for o in options] == [
        ("Q2_K", 2),
        ("Q4_K_M", 1),
        ("Q8_0", 1),
    ]
    assert options[0]["gguf_file"] == "split/tiny-Q2_K-00001-of-00002.gguf"
    assert [o["total_bytes"] for o in options] == sorted(o["total_bytes"] for o in options)
    config_only = app.get("/models/gguf-quants", params={"model_id": TINY_LLM})
    assert config_only.json() == {"model_id": TINY_LLM, "options": []}


def test_card_summary_is_prose_without_markup(app: AppNode) -> None:
    summary = app.get("/models/card-summary", params={"model_id": TINY}).json()["summary"]
    assert summary.startswith("A tiny model for tests, made of GGUF headers and filler.")
    assert "It answers nothing useful." in summary
    assert "**" not in summary and "license" not in summary and "|" not in summary
    missing = app.get("/models/card-summary", params={"model_id": TINY_LLM})
    assert missing.json() == {"model_id": TINY_LLM, "summary": ""}


# -- add --------------------------------------------------------------------------------


def test_add_pins_main_to_the_commit_and_reads_only_the_header(app: AppNode, hub: FakeHub) -> None:
    repo = hub.repo(TINY)
    assert repo is not None
    size = repo.files["tiny-Q4_K_M.gguf"].size()
    before = hub.served["tiny-Q4_K_M.gguf"]
    added = add(app, model_id=TINY)
    assert added.status_code == 200, added.text
    item = added.json()
    assert item["id"] == TINY
    assert item["source_revision"] == repo.commit
    assert item["artifact_file"] == "tiny-Q4_K_M.gguf"  # the default preference
    assert item["catalog_source"] == "custom"
    assert item["installed"] is False
    fetched = hub.served["tiny-Q4_K_M.gguf"] - before
    assert 0 < fetched < size / 4, (fetched, size)
    card = app.node.catalog().get(TINY)
    assert card is not None
    assert (card.card.n_layers, card.card.num_key_value_heads, card.card.head_dim) == (2, 2, 16)
    assert card.card.context_length == 2048
    assert card.card.chat_template is not None
    assert card.card.compatible_backends == ("llama_cpp",)


def test_add_a_split_quant_stores_its_first_shard(app: AppNode, hub: FakeHub) -> None:
    repo = hub.repo(TINY)
    assert repo is not None
    added = add(
        app,
        model_id=TINY,
        gguf_file="split/tiny-Q2_K-00001-of-00002.gguf",
        source_revision=repo.commit,
    )
    assert added.status_code == 200, added.text
    assert added.json()["artifact_file"] == "split/tiny-Q2_K-00001-of-00002.gguf"
    entry = app.node.catalog().get(TINY)
    assert entry is not None
    assert entry.card.storage_size.in_bytes == sum(
        repo.files[f"split/tiny-Q2_K-0000{i}-of-00002.gguf"].size() for i in (1, 2)
    )


def test_add_a_config_json_repository(app: AppNode) -> None:
    added = add(app, model_id=TINY_LLM)
    assert added.status_code == 200, added.text
    entry = app.node.catalog().get(TINY_LLM)
    assert entry is not None
    assert entry.card.architecture == "LlamaForCausalLM"
    assert (entry.card.n_layers, entry.card.head_dim, entry.card.context_length) == (4, 16, 4096)
    assert entry.card.storage_size.in_bytes == 20 * 1024
    assert entry.card.gguf_file is None


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"model_id": TINY, "source_revision": "main"}, 400, "40-character"),
        ({"model_id": TINY, "source_revision": "ABCDEF" * 6 + "abcd"}, 400, "40-character"),
        ({"model_id": TINY, "source_revision": "0" * 40}, 404, "no such revision"),
        ({"model_id": TINY, "gguf_file": "tiny-Q5_K_M.gguf"}, 400, "not a GGUF weight file"),
        (
            {"model_id": TINY, "gguf_file": "split/tiny-Q2_K-00002-of-00002.gguf"},
            400,
            "pin the first shard",
        ),
        ({"model_id": TINY, "gguf_file": "../tiny-Q4_K_M.gguf"}, 400, "repo-relative"),
        ({"model_id": ESCAPE}, 400, "unsafe path"),
        ({"model_id": "../../etc"}, 400, "owner/name"),
        ({"model_id": "test-org/.."}, 400, "owner/name"),
        ({"model_id": "test-org/nope"}, 400, "private, gated or does not exist"),
    ],
)
def test_add_refusals(app: AppNode, body: dict[str, str], status: int, says: str) -> None:
    refused = add(app, **body)
    assert refused.status_code == status, refused.text
    assert says in error(refused)


def test_unknown_repository_with_a_token_is_404(
    app: AppNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", KNOWN_TOKEN)
    refused = add(app, model_id="test-org/nope")
    assert refused.status_code == 404
    assert "not a model repository" in error(refused)


def test_gated_repository_explains_the_fix(app: AppNode, monkeypatch: pytest.MonkeyPatch) -> None:
    anonymous = add(app, model_id=GATED)
    assert anonymous.status_code == 400
    assert "HTTP 401" in error(anonymous)
    assert "configure a Hugging Face token" in error(anonymous)
    assert f"{os.environ['HF_ENDPOINT']}/{GATED}" in error(anonymous)

    monkeypatch.setenv("HF_TOKEN", KNOWN_TOKEN)
    not_accepted = add(app, model_id=GATED)
    assert not_accepted.status_code == 400
    assert "HTTP 403" in error(not_accepted)
    assert "same account the configured token belongs to" in error(not_accepted)
    assert KNOWN_TOKEN not in not_accepted.text

    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    accepted = add(app, model_id=GATED)
    assert accepted.status_code == 200, accepted.text
    assert GOOD_TOKEN not in app.get("/config").text


def test_remote_code_approvals_are_deprecated_and_inert(app: AppNode) -> None:
    listed = app.get("/models/remote-code-approvals")
    assert listed.status_code == 200
    assert listed.json()["approvals"] == [] and listed.json()["deprecated"] is True
    assert app.post("/models/remote-code-approvals/card_x", json={}).status_code == 409
    assert app.http.delete("/models/remote-code-approvals/card_x").status_code == 404


# -- downloads ----------------------------------------------------------------------------


def _state_progress(app: AppNode, model_id: str) -> dict[str, Any] | None:
    downloads = app.get("/state").json().get("downloads", {})
    for reports in downloads.values():
        for report in reports:
            if report["modelId"] == model_id:
                found: dict[str, Any] = report
                return found
    return None


def _wait(predicate: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def start(app: AppNode, model_id: str, node_id: str | None = None) -> Any:
    target = node_id or app.node.node_id
    return app.post(
        "/download/start", json={"target_node_id": target, "model_id": model_id}, timeout=60
    )


def test_download_refusals(app: AppNode, monkeypatch: pytest.MonkeyPatch) -> None:
    assert add(app, model_id=TINY_LLM).status_code == 200
    elsewhere = start(app, TINY_LLM, node_id="12D3KooWnotthisnode")
    assert elsewhere.status_code == 404 and "not a member of this cluster" in error(elsewhere)
    assert start(app, "test-org/never-added").status_code == 404
    entry = app.node.catalog().get(TINY_LLM)
    assert entry is not None
    forged = {**_card_json(app, TINY_LLM), "nLayers": 99}
    mismatch = app.post(
        "/download/start",
        json={"target_node_id": app.node.node_id, "shard_metadata": {"model_card": forged}},
    )
    assert mismatch.status_code == 409
    monkeypatch.setenv("SKULK_DOWNLOAD_RESERVE_BYTES", str(1 << 60))
    full = start(app, TINY_LLM)
    assert full.status_code == 507
    assert "not enough disk" in error(full)
    _wait(
        lambda: (p := _state_progress(app, TINY_LLM)) and p["status"] == "failed",
        "the refusal in /state",
    )
    assert not (Path(app.node.models_dir) / "test-org--tiny-llm" / "model.safetensors").exists()


def _card_json(app: AppNode, model_id: str) -> dict[str, Any]:
    import msgspec  # noqa: PLC0415

    entry = app.node.catalog().get(model_id)
    assert entry is not None
    card: dict[str, Any] = msgspec.to_builtins(entry.card)
    return card


def test_download_cancel_keeps_the_partial_and_resumes(app: AppNode, hub: FakeHub) -> None:
    assert add(app, model_id=TINY, gguf_file="tiny-Q8_0.gguf").status_code == 200
    repo = hub.repo(TINY)
    assert repo is not None
    size = repo.files["tiny-Q8_0.gguf"].size()
    target = Path(app.node.models_dir) / "test-org--tiny-GGUF" / "tiny-Q8_0.gguf"
    partial = target.with_name("tiny-Q8_0.gguf.incomplete")
    hub.bytes_per_second = 1024 * 1024
    try:
        started = start(app, TINY)
        assert started.status_code == 200, started.text
        assert started.json()["status"] == "in_progress"
        _wait(
            lambda: (p := _state_progress(app, TINY)) and p["downloadedBytes"] > 0,
            "progress in /state",
        )
        cancelled = app.http.delete(f"/download/{app.node.node_id}/{TINY}")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
    finally:
        hub.bytes_per_second = None
    kept = partial.stat().st_size
    assert 0 < kept < size
    assert not target.exists()
    assert start(app, TINY).status_code == 200
    _wait(lambda: (p := _state_progress(app, TINY)) and p["status"] == "completed", "completion")
    assert hub.ranges[-1] == ("tiny-Q8_0.gguf", kept)  # resumed where it stopped, not redone
    assert target.stat().st_size == size and not partial.exists()
    listed = {m["id"]: m for m in app.get("/v1/models").json()["data"]}
    assert listed[TINY]["installed"] is True

    deleted = app.http.delete(f"/download/{app.node.node_id}/{TINY}")
    assert deleted.status_code == 200 and deleted.json()["status"] == "deleted"
    assert not target.exists()
    assert app.http.delete(f"/download/{app.node.node_id}/{TINY}").status_code == 404


def test_a_transfer_the_hub_drops_resumes_where_it_broke(app: AppNode, hub: FakeHub) -> None:
    assert add(app, model_id=TINY, gguf_file="tiny-Q4_K_M.gguf").status_code == 200
    hub.drop_after["tiny-Q4_K_M.gguf"] = 1536 * 1024
    assert start(app, TINY).status_code == 200
    _wait(lambda: (p := _state_progress(app, TINY)) and p["status"] == "completed", "completion")
    # huggingface-hub's retry asked for the rest from the last byte written.
    assert hub.ranges[-1] == ("tiny-Q4_K_M.gguf", 1024 * 1024)
    assert app.http.delete(f"/download/{app.node.node_id}/{TINY}").status_code == 200


def test_a_digest_mismatch_publishes_nothing(app: AppNode, hub: FakeHub) -> None:
    repo = hub.repo(TINY)
    assert repo is not None
    name = "split/tiny-Q2_K-00002-of-00002.gguf"
    repo.digests(name)  # the listing's digest is of the original bytes
    original = repo.files[name]
    repo.files[name] = HubFile(b"\xff" * original.size())
    try:
        assert add(app, model_id=TINY, gguf_file="split/tiny-Q2_K-00001-of-00002.gguf").is_success
        assert start(app, TINY).status_code == 200
        failed = _wait(
            lambda: (p := _state_progress(app, TINY)) and p["status"] == "failed" and p,
            "the failure",
        )
    finally:
        repo.files[name] = original
    assert "digest mismatch" in failed["errorMessage"]
    model_dir = Path(app.node.models_dir) / "test-org--tiny-GGUF"
    assert not (model_dir / name).exists()
    assert not (model_dir / ".skulk" / "installed-card.json").exists()
    entry = app.node.catalog().get(TINY)
    assert entry is not None and not entry.installed

    # With the Hub's bytes right again, the same download completes the whole group.
    assert start(app, TINY).status_code == 200
    _wait(lambda: (p := _state_progress(app, TINY)) and p["status"] == "completed", "completion")
    assert (model_dir / name).stat().st_size == original.size()
    assert (model_dir / "split" / "tiny-Q2_K-00001-of-00002.gguf").is_file()
    entry = app.node.catalog().get(TINY)
    assert entry is not None and entry.installed
    assert app.http.delete(f"/download/{app.node.node_id}/{TINY}").status_code == 200


# -- local import ---------------------------------------------------------------------------


def test_import_refusals(app: AppNode, tmp_path: Path) -> None:
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_bytes(b"not a gguf at all" * 10)
    text = tmp_path / "model.bin"
    text.write_bytes(tiny_gguf())
    secret = app.data_dir / "stolen.gguf"
    secret.write_bytes(tiny_gguf())
    link = tmp_path / "innocent.gguf"
    link.symlink_to(secret)
    cases = [
        ({"path": "relative/model.gguf"}, 400, "absolute"),
        ({"path": f"{tmp_path}/../{tmp_path.name}/x.gguf"}, 400, "'..'"),
        ({"path": str(text)}, 400, "not a .gguf file"),
        ({"path": str(tmp_path / "missing.gguf")}, 404, "does not exist"),
        ({"path": str(not_gguf)}, 400, "not a usable GGUF"),
        ({"path": str(secret)}, 400, "private directory"),
        ({"path": str(link)}, 400, "private directory"),
        ({"path": str(not_gguf), "model_id": "../escape"}, 400, "owner/name"),
    ]
    for body, status, says in cases:
        refused = app.post("/models/import", json=body)
        assert refused.status_code == status, (body, refused.text)
        assert says in error(refused), (body, error(refused))


def test_import_links_hashes_and_refuses_a_second_import(app: AppNode, tmp_path: Path) -> None:
    source = tmp_path / "My Tiny-Q4_K_M.gguf"
    source.write_bytes(tiny_gguf())
    imported = app.post("/models/import", json={"path": str(source)})
    assert imported.status_code == 200, imported.text
    body = imported.json()
    assert body["model_id"] == "local/My-Tiny-Q4_K_M"
    import hashlib  # noqa: PLC0415

    assert body["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    linked = Path(app.node.models_dir) / "local--My-Tiny-Q4_K_M" / source.name
    assert linked.stat().st_ino == source.stat().st_ino  # one copy of the bytes
    entry = app.node.catalog().get("local/My-Tiny-Q4_K_M")
    assert entry is not None and entry.installed
    assert (entry.card.n_layers, entry.card.architecture) == (2, "llama")
    again = app.post("/models/import", json={"path": str(source)})
    assert again.status_code == 409


def test_inference_and_reads_never_discover_a_repository(app: AppNode, hub: FakeHub) -> None:
    before = len(hub.requests)
    unknown = "test-org/never-added-either"
    chat = app.post(
        "/v1/chat/completions",
        json={"model": unknown, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 404
    assert app.get("/models/requirements", params={"model_id": unknown}).status_code == 404
    placed = app.post(
        "/place_instance",
        json={"model_id": unknown, "sharding": "Pipeline", "instance_meta": "MlxRing"},
    )
    assert placed.status_code == 404
    assert len(hub.requests) == before  # nothing asked the hub


def test_download_a_safetensors_model_with_its_configuration(app: AppNode) -> None:
    assert add(app, model_id=TINY_LLM).status_code == 200
    assert start(app, TINY_LLM).status_code == 200
    _wait(
        lambda: (p := _state_progress(app, TINY_LLM)) and p["status"] == "completed",
        "completion",
    )
    model_dir = Path(app.node.models_dir) / "test-org--tiny-llm"
    assert {p.name for p in model_dir.iterdir() if p.is_file()} == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    }
    entry = app.node.catalog().get(TINY_LLM)
    assert entry is not None and entry.installed
    # A second start observes the finished download instead of fetching again.
    again = start(app, TINY_LLM)
    assert again.json()["status"] == "completed"


def _proposal(app: AppNode, proposal_id: str) -> dict[str, Any]:
    listed = app.get("/v1/steward/proposals").json()["proposals"]
    found: dict[str, Any] = next(p for p in listed if p["proposal_id"] == proposal_id)
    return found


def _propose_cancel(app: AppNode, model_id: str) -> str:
    node = app.node
    name = node_names(node.state, node.view().telemetry)[node.node_id]
    arguments = {"model_id": model_id, "node_name": name, "rationale": "test"}
    book = ProposalBook(node)
    text = app._test_client.blocking_portal.call(book.propose, "cancel_download", arguments, "")
    assert text.startswith("proposal prop_"), text
    return text.split()[1]


def test_cancel_download_proposals_are_bound_to_one_transfer_attempt(
    app: AppNode, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An approval cancels the exact attempt it names: after a retry replaced that
    attempt the approval fails closed and the retry keeps moving; the worker itself
    refuses a cancellation of a replaced attempt (409, nothing cancelled or deleted)."""
    assert add(app, model_id=TINY, gguf_file="tiny-Q8_0.gguf").status_code == 200
    if (p := _state_progress(app, TINY)) and p["status"] == "completed":
        app.http.delete(f"/download/{app.node.node_id}/{TINY}")
    url = f"/download/{app.node.node_id}/{TINY}"
    # Small pieces: a cancel is seen within a quarter second, a transfer lasts ~12 s.
    monkeypatch.setattr(download, "TRANSFER_CHUNK_BYTES", 64 * 1024)
    hub.bytes_per_second = 256 * 1024
    try:
        assert start(app, TINY).status_code == 200
        first = _wait(lambda: (p := _state_progress(app, TINY)) and p.get("attemptId"), "attempt")
        stale = _propose_cancel(app, TINY)
        # The operator cancels by hand and starts again: a retry, a new attempt.
        assert app.http.delete(url).json()["status"] == "cancelled"
        assert start(app, TINY).status_code == 200
        retry = _wait(
            lambda: (p := _state_progress(app, TINY)) and p["status"] == "in_progress" and p,
            "the retry in /state",
        )
        assert retry["attemptId"] != first
        refused = app.http.delete(url, params={"attempt_id": first})
        assert refused.status_code == 409 and "no longer in flight" in error(refused)
        assert app.http.delete(url, params={"attempt_id": "../x"}).status_code == 400

        decided = app.post(f"/v1/steward/proposals/{stale}/decision", json={"approved": True})
        assert decided.status_code == 200, decided.text
        _wait(lambda: _proposal(app, stale)["status"] == "failed", "the stale approval to fail")
        assert "finished or was replaced" in _proposal(app, stale)["outcome"]
        moving = _state_progress(app, TINY)
        assert moving is not None and moving["status"] == "in_progress"
        assert moving["attemptId"] == retry["attemptId"]

        current = _propose_cancel(app, TINY)
        decided = app.post(f"/v1/steward/proposals/{current}/decision", json={"approved": True})
        assert decided.status_code == 200, decided.text
        _wait(lambda: _proposal(app, current)["status"] == "dispatched", "the dispatch")
        _wait(
            lambda: (p := _state_progress(app, TINY)) and p["status"] == "cancelled",
            "the exact attempt cancelled",
        )
        assert first not in app.get("/v1/steward/proposals").text  # internal identity
    finally:
        hub.bytes_per_second = None


def test_a_configured_token_is_used_and_never_shown(app: AppNode, hub: FakeHub) -> None:
    # Last in the module: a stored token cannot be blanked out again through PUT /config.
    document = app.get("/config").json()["config"]
    assert "hf_token" not in document
    stored = app.http.put("/config", json={**document, "hf_token": GOOD_TOKEN})
    assert stored.status_code == 200, stored.text
    assert app.node.config.hf_token == GOOD_TOKEN
    added = add(app, model_id=GATED)
    assert added.status_code == 200, added.text
    assert GOOD_TOKEN not in app.get("/config").text
    assert GOOD_TOKEN not in app.get("/state").text
