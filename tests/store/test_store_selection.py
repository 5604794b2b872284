"""The store download's selection rules, through the real app and the store listener.

One store-host app for the module, fetching from the fake hub. Its signed catalog is a
real ``catalog.json`` (encoded and parsed by :mod:`skulk_core.registry.format`, so
every content-derived id is checked) holding a v2 card with an artifact bundle and a
declared ``vision_weights`` companion, and a legacy v1 card. The TUF transport that
delivers such a document is covered by ``tests/registry``. Each rule of the spec gets
its status: malformed identifiers and roles 400, an unverifiable card id, a changed,
missing or legacy bundle and an undeclared companion 409; the pinned card, the
companion and a search result absent from the catalog are then really fetched, and the
store's registry and ``/v1/models`` say which card and verification each came under.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import msgspec
import pytest

from skulk_core.ids import ModelId
from skulk_core.models.advisories import Advisory, Severity
from skulk_core.models.cards import (
    ArtifactBundle,
    ArtifactRole,
    BundleFile,
    CompanionArtifact,
    Memory,
    ModelCard,
)
from skulk_core.registry.bundles import make_bundle
from skulk_core.registry.format import (
    CatalogRejectedError,
    Provenance,
    VerifiedCatalog,
    encode_catalog,
    parse_catalog,
    unsigned,
)
from tests.api.in_process import AppNode
from tests.daemon_process import free_port
from tests.hub.conftest import TINY, standard_repos
from tests.hub.fake_hub import FakeHub, pointed_at
from tests.store.store_app import store_host_config, wait

GGUF = "tiny-Q4_K_M.gguf"
PROJECTOR = "mmproj-tiny-F16.gguf"
SIGNED = "sig/tiny"
LEGACY = "legacy/tiny"
VISION = "sig/tiny-vision"
OTHER_CARD = "card_" + "0" * 64
OTHER_BUNDLE = "bundle_" + "0" * 64


class Setup:
    def __init__(
        self,
        app: AppNode,
        store_port: int,
        signed: ModelCard,
        catalogs: list[VerifiedCatalog],
    ) -> None:
        self.app = app
        self.store_port = store_port
        self.signed = signed
        self.catalogs = catalogs
        """The signed catalog the node reads: the last one (a test may publish another)."""

    @property
    def card_id(self) -> str:
        assert self.signed.registry_card_id is not None
        return self.signed.registry_card_id

    @property
    def bundle_id(self) -> str:
        assert self.signed.artifact_bundle is not None
        return self.signed.artifact_bundle.bundle_id

    def download(self, model_id: str, body: dict[str, Any]) -> httpx.Response:
        return self.app.post(f"/store/models/{model_id}/download", json=body, timeout=60)

    def listener(self, model_id: str, body: dict[str, Any]) -> httpx.Response:
        url = f"http://127.0.0.1:{self.store_port}/models/{quote(model_id, safe='')}/download"
        return httpx.post(url, json=body, timeout=60)

    def wait_complete(self, model_id: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            body = self.app.get(f"/store/models/{model_id}/download/status").json()
            if body.get("status") == "complete":
                return
            assert body.get("status") in ("pending", "in_progress"), body
            time.sleep(0.1)
        raise AssertionError(f"the store download of {model_id} did not complete")

    def entry(self, model_id: str) -> dict[str, Any]:
        answer = self.app.get("/store/registry")
        assert answer.status_code == 200, answer.text
        for item in answer.json()["entries"]:
            if item["model_id"] == model_id:
                found: dict[str, Any] = item
                return found
        raise AssertionError(f"{model_id} is not in the store registry")

    def listed(self, model_id: str) -> dict[str, Any]:
        for item in self.app.get("/v1/models").json()["data"]:
            if item["id"] == model_id:
                found: dict[str, Any] = item
                return found
        raise AssertionError(f"{model_id} is not in /v1/models")

    def files(self, model_id: str) -> list[str]:
        url = f"http://127.0.0.1:{self.store_port}/models/{quote(model_id, safe='')}/files"
        return sorted(f["path"] for f in httpx.get(url, timeout=30).json()["files"])


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Iterator[Setup]:
    repos = standard_repos()
    tiny = next(r for r in repos if r.repo_id == TINY)
    commit = tiny.commit
    signed_card = ModelCard(
        model_id=ModelId(SIGNED),
        storage_size=Memory(in_bytes=tiny.files[GGUF].size()),
        n_layers=2,
        source_repository=TINY,
        source_revision=commit,
        gguf_file=GGUF,
        artifact_bundle=make_bundle("", (BundleFile(path=GGUF, size=tiny.files[GGUF].size()),)),
        companions=(
            CompanionArtifact(
                role=ArtifactRole.VISION_WEIGHTS,
                source_repository=TINY,
                source_revision=commit,
                gguf_file=PROJECTOR,
            ),
        ),
    )
    legacy_card = ModelCard(
        model_id=ModelId(LEGACY),
        storage_size=Memory(in_bytes=tiny.files[GGUF].size()),
        n_layers=2,
        source_repository=TINY,
        source_revision=commit,
        gguf_file=GGUF,
    )
    catalog = parse_catalog(
        encode_catalog([(signed_card, Provenance.FOXLIGHT), (legacy_card, Provenance.COMMUNITY)])
    )
    signed = next(c for c in catalog.cards if c.model_id == SIGNED)
    root = tmp_path_factory.mktemp("store-selection")
    port = free_port()
    config = store_host_config(root, port)
    with (
        FakeHub(repos) as hub,
        pointed_at(hub),
        AppNode(root=root, models_dir=models_dir, config_yaml=config) as app,
    ):
        catalogs = [catalog]
        app.node.registry_catalog = lambda: catalogs[-1]
        wait(lambda: app.get("/state").json().get("storeHosts"), "the store role in State")
        yield Setup(app, port, signed, catalogs)


MALFORMED: list[tuple[dict[str, Any], str]] = [
    ({"gguf_file": ""}, "gguf_file"),
    ({"gguf_file": "../up.gguf"}, "gguf_file"),
    ({"gguf_file": "weights.bin"}, "gguf_file"),
    ({"extra_gguf_files": [""]}, "extra_gguf_files"),
    ({"source_revision": "main"}, "source_revision"),
    ({"source_revision": "A" * 40}, "source_revision"),
    ({"source_repository": "no-slash"}, "source_repository"),
    ({"source_repository": "o/" + "r" * 600}, "512"),
    ({"registry_card_id": "card_short"}, "registry_card_id"),
    ({"artifact_bundle_id": "bundle_1"}, "artifact_bundle_id"),
    ({"artifact_role": "sidekick"}, "artifact_role"),
    ({"artifact_role": "served_draft"}, "owner_model_id is required"),
    ({"owner_model_id": "owner/base"}, "non-base artifact_role"),
    (
        {"artifact_role": "served_draft", "owner_model_id": "o/b", "owner_registry_card_id": "x"},
        "owner_registry_card_id",
    ),
]


@pytest.mark.parametrize(("body", "named"), MALFORMED)
def test_malformed_identifiers_and_roles_are_400_on_both_paths(
    setup: Setup, body: dict[str, Any], named: str
) -> None:
    public = setup.download(SIGNED, body)
    assert public.status_code == 400, public.text
    assert named in public.json()["error"]["message"]
    internal = setup.listener(SIGNED, body)
    assert internal.status_code == 400, internal.text
    assert named in internal.json()["error"]["message"]


def test_a_card_id_the_store_cannot_verify_is_409(setup: Setup) -> None:
    other = setup.download(SIGNED, {"registry_card_id": OTHER_CARD})
    assert other.status_code == 409, other.text
    message = other.json()["error"]["message"]
    assert "cannot verify" in message and setup.card_id in message
    absent = setup.listener("nobody/unsigned", {"registry_card_id": setup.card_id})
    assert absent.status_code == 409, absent.text
    assert "publishes no card" in absent.json()["error"]["message"]


def test_a_changed_missing_or_legacy_bundle_is_409(setup: Setup) -> None:
    changed = setup.download(SIGNED, {"artifact_bundle_id": OTHER_BUNDLE})
    assert changed.status_code == 409, changed.text
    assert "changed" in changed.json()["error"]["message"]
    legacy = setup.download(LEGACY, {"artifact_bundle_id": setup.bundle_id})
    assert legacy.status_code == 409, legacy.text
    assert "legacy" in legacy.json()["error"]["message"]
    missing = setup.download("nobody/none", {"artifact_bundle_id": setup.bundle_id})
    assert missing.status_code == 409, missing.text
    # The store host applies the same rule when asked directly.
    direct = setup.listener(SIGNED, {"artifact_bundle_id": OTHER_BUNDLE})
    assert direct.status_code == 409, direct.text


def test_an_undeclared_companion_is_409(setup: Setup) -> None:
    base = {
        "artifact_role": "vision_weights",
        "source_repository": TINY,
        "gguf_file": PROJECTOR,
        "owner_model_id": SIGNED,
        "owner_registry_card_id": setup.card_id,
    }
    for change, why in (
        ({"artifact_role": "mtp_sidecar"}, "declares no mtp_sidecar"),
        ({"gguf_file": "tiny-Q8_0.gguf"}, "declares no vision_weights"),
        ({"source_revision": "f" * 40}, "declares no vision_weights"),
        ({"source_repository": "test-org/tiny-llm"}, "declares no vision_weights"),
        ({"owner_registry_card_id": OTHER_CARD}, "cannot verify owner card"),
        ({"owner_registry_card_id": None}, "name it as owner_registry_card_id"),
        ({"owner_model_id": "nobody/owner"}, "not in the catalog"),
    ):
        answer = setup.download(VISION, {**base, **change})
        assert answer.status_code == 409, (change, answer.text)
        assert why in answer.json()["error"]["message"], (change, answer.text)


def test_a_pinned_signed_card_is_fetched_and_recorded_as_verified(setup: Setup) -> None:
    body = {"registry_card_id": setup.card_id, "artifact_bundle_id": setup.bundle_id}
    started = setup.download(SIGNED, body)
    assert started.status_code == 200, started.text
    assert started.json()["status"] in ("in_progress", "complete"), started.text
    setup.wait_complete(SIGNED)
    entry = setup.entry(SIGNED)
    assert entry["installed_verification"] == "registry_verified"
    assert entry["registry_card_id"] == setup.card_id
    assert entry["artifact_bundle_id"] == setup.bundle_id
    assert entry["artifact_role"] == "base"
    assert entry["last_verified_at"] >= entry["installed_at"] - 1
    assert setup.files(SIGNED) == [GGUF]  # the bundle's files, nothing more
    [here] = entry["cached_on_nodes"]
    assert here["location_kind"] == "store_local" and here["complete"] is True
    assert here["identity"] == f"{SIGNED}@{entry['manifest_sha256']}"
    assert here["in_use"] is False and here["bytes"] == entry["total_bytes"]
    assert entry["reconciliation_state"] == "verified"
    # The installed generation is the one the registry publishes: nothing to update.
    assert entry["current_registry_identity"] == setup.card_id
    assert entry["installed_not_current"] is False and entry["update_available"] is False
    assert entry["advisories"] == []
    inventory = setup.app.get("/store/registry").json()["cache_inventory"]
    assert inventory["coverage"] == "current" and inventory["observed_nodes"] == 1
    listed = setup.listed(SIGNED)
    assert listed["installed"] is True
    assert listed["installed_verification"] == "registry_verified"
    assert listed["registry_card_id"] == setup.card_id
    # Asking again for the same generation answers complete without a transfer.
    again = setup.download(SIGNED, body)
    assert again.status_code == 200 and again.json()["status"] == "complete", again.text


def test_a_declared_companion_is_fetched_under_its_owner(setup: Setup) -> None:
    body = {
        "artifact_role": "vision_weights",
        "source_repository": TINY,
        "gguf_file": PROJECTOR,
        "owner_model_id": SIGNED,
        "owner_registry_card_id": setup.card_id,
        "extra_gguf_files": [],
    }
    started = setup.download(VISION, body)
    assert started.status_code == 200, started.text
    setup.wait_complete(VISION)
    entry = setup.entry(VISION)
    assert entry["artifact_role"] == "vision_weights"
    assert entry["owner_model_id"] == SIGNED
    assert entry["owner_registry_card_id"] == setup.card_id
    assert entry["installed_verification"] == "registry_verified"
    assert entry["gguf_file"] == PROJECTOR
    assert setup.files(VISION) == [PROJECTOR]


def test_a_search_result_absent_from_the_catalog_downloads_unverified(setup: Setup) -> None:
    assert setup.app.get("/v1/models").status_code == 200
    assert all(item["id"] != TINY for item in setup.app.get("/v1/models").json()["data"])
    body = {"gguf_file": GGUF, "extra_gguf_files": [PROJECTOR]}
    started = setup.download(TINY, body)
    assert started.status_code == 200, started.text
    assert started.json()["status"] in ("in_progress", "complete"), started.text
    setup.wait_complete(TINY)
    entry = setup.entry(TINY)
    assert entry["installed_verification"] == "unverified"
    assert entry["registry_card_id"] is None
    # No signed card publishes this alias: not current, and no update to apply.
    assert entry["current_registry_identity"] is None
    assert entry["installed_not_current"] is True and entry["update_available"] is False
    assert setup.files(TINY) == sorted([GGUF, PROJECTOR])  # the extra file was co-fetched
    listed = setup.listed(TINY)
    assert listed["installed"] is True
    assert listed["installed_verification"] != "registry_verified"
    assert listed["registry_card_id"] is None


def test_an_extra_file_missing_from_the_revision_is_a_store_rejection(setup: Setup) -> None:
    answer = setup.download(
        "sig/tiny-other", {"source_repository": TINY, "extra_gguf_files": ["nope.gguf"]}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "error" and "nope.gguf" in body["error"], body


def test_a_signed_card_for_bytes_already_held_is_adopted_without_a_transfer(
    setup: Setup,
) -> None:
    before = setup.entry(TINY)  # fetched unverified above
    assert before["installed_verification"] == "unverified"
    held = setup.app.node.catalog().get(TINY)
    assert held is not None and held.installed_card is not None
    card = msgspec.structs.replace(held.installed_card, is_custom=False)
    current = setup.catalogs[-1]
    republished = parse_catalog(
        encode_catalog(
            [(c, Provenance.FOXLIGHT) for c in map(unsigned, current.cards)]
            + [(card, Provenance.COMMUNITY)]
        )
    )
    setup.catalogs.append(republished)
    signed = next(c for c in republished.cards if c.model_id == TINY)
    # The registry now publishes a signed card the unverified generation is not under,
    # and a signed advisory names that card.
    notice = Advisory(
        id="SKULK-2026-0007",
        severity=Severity.MODERATE,
        summary="re-download under the signed card",
        card_ids=(str(signed.registry_card_id),),
    )
    setup.catalogs[-1] = msgspec.structs.replace(republished, advisories=(notice,))
    pending = setup.entry(TINY)
    assert pending["current_registry_identity"] == signed.registry_card_id
    assert pending["update_available"] is True and pending["installed_not_current"] is True
    assert [a["id"] for a in pending["advisories"]] == [notice.id]
    answer = setup.download(TINY, {"registry_card_id": signed.registry_card_id})
    assert answer.status_code == 200 and answer.json()["status"] == "complete", answer.text
    after = setup.entry(TINY)
    assert after["installed_verification"] == "registry_verified"
    assert after["registry_card_id"] == signed.registry_card_id
    assert after["manifest_sha256"] == before["manifest_sha256"]  # the same bytes
    assert after["update_available"] is False and after["installed_not_current"] is False
    assert setup.listed(TINY)["installed_verification"] == "registry_verified"


def test_a_catalog_whose_bundle_id_does_not_match_its_files_is_refused() -> None:
    forged = ModelCard(
        model_id=ModelId("forged/bundle"),
        storage_size=Memory(in_bytes=10),
        n_layers=1,
        source_repository="forged/bundle",
        source_revision="a" * 40,
        artifact_bundle=ArtifactBundle(
            bundle_id=OTHER_BUNDLE, files=(BundleFile(path="x.gguf", size=10),)
        ),
    )
    with pytest.raises(CatalogRejectedError, match="bundle"):
        encode_catalog([(forged, Provenance.COMMUNITY)])


def test_a_custom_owner_without_a_registry_identity_owns_its_companion(setup: Setup) -> None:
    commit = setup.signed.source_revision
    owner = {
        "modelId": "own/custom",
        "storageSize": {"inBytes": 1},
        "nLayers": 2,
        "sourceRepository": TINY,
        "sourceRevision": commit,
        "ggufFile": GGUF,
        "companions": [
            {
                "role": "vision_weights",
                "sourceRepository": TINY,
                "sourceRevision": commit,
                "ggufFile": PROJECTOR,
                "modelId": "own/custom-vision",
            }
        ],
    }
    added = setup.app.post("/models/add-card", json={"model_card": owner})
    assert added.status_code == 200, added.text
    body = {
        "artifact_role": "vision_weights",
        "source_repository": TINY,
        "source_revision": commit,
        "gguf_file": PROJECTOR,
        "owner_model_id": "own/custom",
    }
    # The declaration fixes the companion's alias: another alias is a mismatch.
    alias = setup.download("own/other-vision", body)
    assert alias.status_code == 409, alias.text
    started = setup.download("own/custom-vision", body)
    assert started.status_code == 200, started.text
    setup.wait_complete("own/custom-vision")
    entry = setup.entry("own/custom-vision")
    assert entry["installed_verification"] == "custom"
    assert entry["owner_model_id"] == "own/custom" and entry["owner_registry_card_id"] is None
    assert entry["artifact_role"] == "vision_weights"
