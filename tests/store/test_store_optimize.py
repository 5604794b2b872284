"""OptiQ end to end on a real daemon: the demo model optimized, stored, placed, chatting.

One store-host daemon for the module, pointed at the fake hub serving the demo GGUF.
The demo is fetched into the store; ``skulk store optimize`` requantizes it towards
4.5 bits a weight (4 and 8 bit candidates) and waits; while it runs a second start
is refused (409). The result is a stored model of its own, tagged ``optiq``, smaller
than the source, that places and answers a chat like any other; optimizing it again
is refused while the result exists.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon.serving import PROMPT, place, wait_for
from tests.daemon_process import DaemonProcess, free_port
from tests.hub.conftest import DEMO_REPO, standard_repos
from tests.hub.fake_hub import FakeHub
from tests.lazy_sdk import openai

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("timing")]

RESULT = f"{DEMO_REPO}-optiq-4.5bpw"


@pytest.fixture(scope="module")
def hub(demo_gguf: Path) -> Iterator[FakeHub]:
    with FakeHub(standard_repos(demo_gguf)) as served:
        yield served


@pytest.fixture(scope="module")
def daemon(
    hub: FakeHub, tmp_path_factory: pytest.TempPathFactory, models_dir: Path
) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("optimize-daemon")
    node = DaemonProcess(root=root, models_dir=models_dir, extra_env={"HF_ENDPOINT": hub.url})
    config = node.config_home / "skulk.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "model_store:\n"
        "  store_host: true\n"
        f"  store_path: {root / 'canonical'}\n"
        f"  store_port: {free_port()}\n"
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


def job(daemon: DaemonProcess) -> dict[str, Any]:
    answer = daemon.get(f"/store/models/{DEMO_REPO}/optimize/status")
    body: dict[str, Any] = answer.json() if answer.status_code == 200 else {}
    return body


def test_optimize_the_demo_then_place_and_chat_with_the_result(
    daemon: DaemonProcess, demo_gguf: Path
) -> None:
    assert daemon.post("/models/add", json={"model_id": DEMO_REPO}, timeout=120).status_code == 200
    started = daemon.post(f"/store/models/{DEMO_REPO}/download", json={}, timeout=60)
    assert started.status_code == 200, started.text
    wait_for(
        lambda: (
            daemon.get(f"/store/models/{DEMO_REPO}/download/status").json()["status"] == "complete"
        ),
        "the store download",
        120,
    )

    waiting = subprocess.Popen(
        [
            *(sys.executable, "-m", "skulk_cli", "--api-url", daemon.url, "--json"),
            *("store", "optimize", DEMO_REPO, "--target-bpw", "4.5"),
            *("--candidate-bits", "4", "--candidate-bits", "8"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        running = wait_for(lambda: job(daemon).get("status") == "running" and job(daemon), "a job")
        assert running["resultModelId"] == RESULT and running["targetBpw"] == 4.5
        again = daemon.post(f"/store/models/{DEMO_REPO}/optimize", json={})
        assert again.status_code == 409, again.text
        seen = wait_for(lambda: 0 < job(daemon).get("progress", 0) < 1 and job(daemon), "progress")
        assert seen["status"] in ("running", "completed")
        out, err = waiting.communicate(timeout=240)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, (out, err)
    done = json.loads(out)
    assert done["status"] == "completed" and done["progress"] == 1.0, done
    assert 4.0 < done["achievedBpw"] <= 4.5
    result = Path(done["resultPath"])
    assert result.stat().st_size < demo_gguf.stat().st_size
    assert done["estimatedSizeMb"] == pytest.approx(result.stat().st_size / 2**20, abs=0.01)

    listed = {m["id"]: m for m in daemon.get("/v1/models").json()["data"]}
    assert "optiq" in listed[RESULT]["tags"], listed[RESULT]
    assert listed[RESULT]["installed"] is True
    assert "requantized from" in listed[RESULT]["quantization"], listed[RESULT]
    entries = daemon.get("/store/registry").json()["entries"]
    [entry] = [e for e in entries if e["model_id"] == RESULT]
    assert entry["total_bytes"] == result.stat().st_size

    instance_id = place(daemon, model_id=RESULT, context=512)
    with openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0) as client:
        reply = client.chat.completions.create(
            model=RESULT,
            messages=PROMPT,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
        )
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert httpx.delete(f"{daemon.url}/instance/{instance_id}", timeout=30).status_code == 200

    shown = skulk(daemon, "store", "optimize-status", DEMO_REPO)
    assert shown.returncode == 0, shown.stderr
    assert "completed" in shown.stdout and RESULT in shown.stdout
    exists = daemon.post(f"/store/models/{DEMO_REPO}/optimize", json={"target_bpw": 4.5})
    assert exists.status_code == 409, exists.text
    assert f"{RESULT} already exists" in exists.json()["error"]["message"]
