"""Load on demand and `skulk run` on a node with no room for the model: clear refusals.

The node caps what Skulk's models may hold (``node.memory_limit_gb``) far below the
demo model, so no preview is valid. A request that would load it on demand gets 503
with the planner's reason, `skulk run` exits 1 naming what to look at, and nothing
is left placed.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.serving import DEMO
from tests.daemon_process import DaemonProcess
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    node = DaemonProcess(root=tmp_path_factory.mktemp("no-room"), models_dir=shared_models_dir)
    node.config_home.mkdir(parents=True, exist_ok=True)
    (node.config_home / "skulk.yaml").write_text(
        "inference:\n  load_on_demand: true\nnode:\n  memory_limit_gb: 0.01\n", encoding="utf-8"
    )
    node.start()
    try:
        yield node
    finally:
        node.kill()


def test_a_request_for_a_model_that_fits_nowhere_is_503_with_the_reason(
    daemon: DaemonProcess,
) -> None:
    with (
        openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0) as client,
        pytest.raises(openai.APIStatusError) as refused,
    ):
        client.chat.completions.create(
            model=DEMO, messages=[{"role": "user", "content": "one, two,"}], max_tokens=2
        )
    assert refused.value.status_code == 503
    message = str(refused.value)
    assert f"Loading model {DEMO} on demand failed: no node has room for it" in message
    assert daemon.get("/state").json()["instances"] == {}


def test_run_says_no_node_has_room_and_where_to_look(daemon: DaemonProcess) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "skulk_cli", "--api-url", daemon.url, "run", DEMO, "hi"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 1
    said = " ".join(ran.stderr.split())
    assert f"No node has room for {DEMO}" in said
    assert f"`skulk previews {DEMO}` shows what fits where" in said
    assert daemon.get("/state").json()["instances"] == {}
