"""Your own model, end to end, on a real daemon, through the CLI and the openai SDK.

One daemon for the module (its own models dir), pointed at the fake hub through
``HF_ENDPOINT``. The fake hub serves the real demo GGUF (from where the session
installed it). First a Hugging Face add: the card is pinned, and placing it before
its bytes are here downloads them first (the runner loading meanwhile, the download's
progress in ``/state`` and in ``skulk place``); the placed model answers a chat. A
download that fails fails the placement visibly. Then a local import of the same file
under another id: hard-linked (one inode), placed, chatting.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon.serving import PROMPT, place
from tests.daemon_process import DaemonProcess
from tests.hub.conftest import DEMO_REPO, TINY, TINY_LLM, seed_models_dir, standard_repos
from tests.hub.fake_hub import FakeHub, HubFile, HubRepo
from tests.lazy_sdk import openai

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("timing")]

IMPORTED = "local/imported-gemma"
CLI = (sys.executable, "-m", "skulk_cli", "--api-url")


@pytest.fixture(scope="module")
def hub(demo_gguf: Path) -> Iterator[FakeHub]:
    with FakeHub(standard_repos(demo_gguf)) as served:
        yield served


@pytest.fixture(scope="module")
def daemon(
    hub: FakeHub, tmp_path_factory: pytest.TempPathFactory, models_dir: Path
) -> Iterator[DaemonProcess]:
    node = DaemonProcess(
        root=tmp_path_factory.mktemp("hub-daemon"),
        models_dir=models_dir,
        extra_env={"HF_ENDPOINT": hub.url},
    )
    node.start()
    try:
        yield node
    finally:
        node.kill()


def skulk(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skulk_cli", "--api-url", daemon.url, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def chat(daemon: DaemonProcess, model_id: str) -> Any:
    with openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0) as client:
        return client.chat.completions.create(
            model=model_id,
            messages=PROMPT,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
        )


def test_add_then_place_downloads_and_chats(
    daemon: DaemonProcess, hub: FakeHub, demo_gguf: Path
) -> None:
    repo = hub.repo(DEMO_REPO)
    assert repo is not None
    added = skulk(daemon, "--json", "models", "add", DEMO_REPO)
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["source_revision"] == repo.commit
    # Only the header was read to make the card.
    assert 0 < hub.served[demo_gguf.name] < demo_gguf.stat().st_size / 4

    # Placed before its bytes are anywhere: the placement downloads them first.
    node_id = daemon.get("/node_id").json()
    hub.bytes_per_second = 100 * 1024 * 1024
    downloads: list[tuple[str, int, int]] = []
    runners: set[str] = set()
    try:
        placing = subprocess.Popen(
            [*CLI, daemon.url, "--json", "place", DEMO_REPO, "--context-tokens", "512"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 180
        while placing.poll() is None and time.monotonic() < deadline:
            state = daemon.get("/state").json()
            for report in state["downloads"].get(node_id, []):
                if report["modelId"] == DEMO_REPO:
                    downloads.append(
                        (report["status"], report["downloadedBytes"], report["totalBytes"])
                    )
            for tagged in state["instances"].values():
                body = next(iter(tagged.values()))
                if body["shardAssignments"]["modelId"] == DEMO_REPO:
                    for runner in body["shardAssignments"]["nodeToRunner"].values():
                        runners.update(state["runners"].get(runner) or ())
            time.sleep(0.2)  # progress is reported every 0.25 s; the node is busy loading
        out, err = placing.communicate(timeout=60)
    finally:
        hub.bytes_per_second = None
    assert placing.returncode == 0, err
    size = demo_gguf.stat().st_size
    # The instance existed (its runner loading) while its bytes were downloading.
    assert any(s == "in_progress" and 0 < done < total == size for s, done, total in downloads)
    assert "RunnerLoading" in runners, runners
    placed = json.loads(out)
    assert placed["failure"] is None

    listed = {m["id"]: m for m in daemon.get("/v1/models").json()["data"]}
    assert listed[DEMO_REPO]["installed"] is True
    model_dir = daemon.models_dir / "test-org--gemma-3-270m-GGUF"
    manifest = json.loads((model_dir / ".skulk" / "files.json").read_text())
    assert manifest["files"][0]["sha256"] == repo.digests(demo_gguf.name)[0]

    reply = chat(daemon, DEMO_REPO)
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    instance_id = placed["place"]["instance_id"]
    assert httpx.delete(f"{daemon.url}/instance/{instance_id}", timeout=30).status_code == 200


def test_a_placement_whose_download_fails_fails_visibly(
    daemon: DaemonProcess, hub: FakeHub, demo_gguf: Path
) -> None:
    repo_id = "test-org/vanishing-GGUF"
    repo = HubRepo(repo_id, {demo_gguf.name: HubFile(demo_gguf)}, library_name="gguf")
    hub.repos.append(repo)
    assert skulk(daemon, "models", "add", repo_id).returncode == 0
    hub.repos.remove(repo)  # the repository is gone by the time its bytes are needed

    placing = skulk(daemon, "place", repo_id, "--context-tokens", "512")
    assert placing.returncode == 1
    assert "download" in placing.stderr and repo_id in placing.stderr, placing.stderr
    failures = daemon.get("/state").json()["instanceFailures"]
    assert any(
        f["modelId"] == repo_id and f["errorCode"].startswith("download_failed:") for f in failures
    ), failures


def test_import_a_local_gguf_and_chat(daemon: DaemonProcess, demo_gguf: Path) -> None:
    imported = skulk(daemon, "--json", "models", "import", str(demo_gguf), "--model-id", IMPORTED)
    assert imported.returncode == 0, imported.stderr
    body = json.loads(imported.stdout)
    linked = daemon.models_dir / "local--imported-gemma" / demo_gguf.name
    assert linked.stat().st_ino == demo_gguf.stat().st_ino  # not copied
    package_sha = hashlib.sha256()
    with demo_gguf.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            package_sha.update(chunk)
    assert body["sha256"] == package_sha.hexdigest()
    assert body["model"]["installed"] is True

    instance_id = place(daemon, model_id=IMPORTED, context=512)
    reply = chat(daemon, IMPORTED)
    assert reply.choices[0].message.content
    assert httpx.delete(f"{daemon.url}/instance/{instance_id}", timeout=30).status_code == 200


def test_search_and_remove_through_the_cli(daemon: DaemonProcess) -> None:
    found = skulk(daemon, "--json", "models", "search", "gemma-3-270m")
    assert found.returncode == 0, found.stderr
    assert DEMO_REPO in [item["id"] for item in json.loads(found.stdout)]
    exact = skulk(daemon, "--json", "models", "search", "gemma-3-270m-q4_k_m.gguf")
    assert exact.returncode == 0, exact.stderr
    assert [(r["id"], r["matched_file"]) for r in json.loads(exact.stdout)] == [
        (DEMO_REPO, "gemma-3-270m-q4_k_m.gguf")
    ]
    table = skulk(daemon, "models", "search", "gemma-3-270m")
    assert table.returncode == 0 and "Repository" in table.stdout and "gemma" in table.stdout

    assert skulk(daemon, "models", "add", TINY_LLM).returncode == 0
    fetched = skulk(daemon, "models", "download", TINY_LLM)  # the progress bar, not JSON
    assert fetched.returncode == 0, fetched.stderr
    assert f"Downloaded {TINY_LLM}" in fetched.stdout

    removed = skulk(daemon, "models", "rm", DEMO_REPO, "--files")
    assert removed.returncode == 0, removed.stderr
    assert not (daemon.models_dir / "test-org--gemma-3-270m-GGUF").exists()
    listed = {m["id"] for m in daemon.get("/v1/models").json()["data"]}
    assert DEMO_REPO not in listed and IMPORTED in listed


def test_run_adds_downloads_places_and_chats_in_one_step(
    daemon: DaemonProcess, hub: FakeHub, demo_gguf: Path
) -> None:
    repo_id = "test-org/run-gemma-GGUF"
    hub.repos.append(HubRepo(repo_id, {demo_gguf.name: HubFile(demo_gguf)}, library_name="gguf"))
    assert repo_id not in {m["id"] for m in daemon.get("/v1/models").json()["data"]}

    ran = skulk(daemon, "run", repo_id, "Count: one, two, three,", "--max-tokens", "4")
    assert ran.returncode == 0, ran.stderr
    steps = [line for line in ran.stderr.splitlines() if line.startswith(("→", "✓"))]
    assert [s.split()[1] for s in steps[:2]] == ["Adding", "Added"], ran.stderr
    assert any(s.startswith("→ Downloading") for s in steps), ran.stderr
    assert any(s.startswith("→ No instance serves") for s in steps), ran.stderr
    assert any("is ready" in s for s in steps), ran.stderr
    assert ran.stdout.strip()
    listed = {m["id"]: m for m in daemon.get("/v1/models").json()["data"]}
    assert listed[repo_id]["installed"] is True

    state = daemon.get("/state").json()
    (instance_id,) = (
        i
        for i, tagged in state["instances"].items()
        if next(iter(tagged.values()))["shardAssignments"]["modelId"] == repo_id
    )
    assert httpx.delete(f"{daemon.url}/instance/{instance_id}", timeout=30).status_code == 200

    missing = skulk(daemon, "run", "test-org/no-such-repo", "hi")
    assert missing.returncode == 1
    assert "Could not add test-org/no-such-repo" in missing.stderr


def test_a_download_survives_the_node_stopping_and_resumes(
    daemon: DaemonProcess, hub: FakeHub
) -> None:
    # Last in the module: it restarts the daemon.
    repo = hub.repo(TINY)
    assert repo is not None
    size = repo.files["tiny-Q8_0.gguf"].size()
    added = daemon.post("/models/add", json={"model_id": TINY, "gguf_file": "tiny-Q8_0.gguf"})
    assert added.status_code == 200, added.text
    node_id = daemon.get("/node_id").json()
    body = {"target_node_id": node_id, "model_id": TINY}
    partial = daemon.models_dir / "test-org--tiny-GGUF" / "tiny-Q8_0.gguf.incomplete"
    hub.bytes_per_second = 512 * 1024
    try:
        assert daemon.post("/download/start", json=body).status_code == 200
        deadline = time.monotonic() + 30
        while not (partial.exists() and partial.stat().st_size > 0):
            assert time.monotonic() < deadline, "no bytes arrived"
            time.sleep(0.1)
        started = time.monotonic()
        code, _ = daemon.stop(timeout=30)  # a transfer in flight does not hold the stop
        assert code == 0 and time.monotonic() - started < 20
    finally:
        hub.bytes_per_second = None
    kept = partial.stat().st_size
    assert 0 < kept < size
    daemon.start()
    assert daemon.post("/download/start", json=body).status_code == 200
    deadline = time.monotonic() + 60
    while (daemon.models_dir / "test-org--tiny-GGUF" / "tiny-Q8_0.gguf").exists() is False:
        assert time.monotonic() < deadline, "the resumed download did not finish"
        time.sleep(0.1)
    assert hub.ranges[-1] == ("tiny-Q8_0.gguf", kept)


def test_a_download_for_another_member_runs_on_that_node(
    daemon: DaemonProcess,
    hub: FakeHub,
    tmp_path_factory: pytest.TempPathFactory,
    shared_models_dir: Path,
) -> None:
    other_models = seed_models_dir(tmp_path_factory.mktemp("hub-b-models"), shared_models_dir)
    other = DaemonProcess(
        root=tmp_path_factory.mktemp("hub-daemon-b"),
        models_dir=other_models,
        peers=[daemon.fabric_address],
        extra_env={"HF_ENDPOINT": hub.url},
    )
    other.start()
    try:
        other_id = other.get("/node_id").json()
        deadline = time.monotonic() + 60
        while TINY not in {m["id"] for m in other.get("/v1/models").json()["data"]}:
            assert time.monotonic() < deadline, "the added card never reached the other node"
            time.sleep(0.2)
        body = {"target_node_id": other_id, "model_id": TINY}
        while (started := daemon.post("/download/start", json=body)).status_code == 404:
            assert time.monotonic() < deadline, started.text  # telemetry not yet gossiped
            time.sleep(0.2)
        assert started.status_code == 200, started.text
        assert started.json()["node_id"] == other_id
        landed = other_models / "test-org--tiny-GGUF" / "tiny-Q8_0.gguf"
        while not landed.exists():
            assert time.monotonic() < deadline, "the other node did not download"
            time.sleep(0.1)
        removed = httpx.delete(f"{daemon.url}/download/{other_id}/{TINY}", timeout=60)
        assert removed.status_code == 200, removed.text
        assert removed.json()["status"] == "deleted" and not landed.exists()
    finally:
        other.kill()
