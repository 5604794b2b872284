"""Images on a real daemon: the locally built model (SDXS-512 layout, random weights)
placed on a stable-diffusion.cpp runner, driven through the official ``openai`` SDK
(``images.generate``, ``images.edit``: b64 and url forms, a partial-image stream), the
stored-image routes, the bench route and ``skulk image``. The pictures are noise, so the
tests check what a client sees: formats, sizes, counts, seeds, streams."""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from skulk_cli.main import app
from tests.daemon.serving import place, wait_for
from tests.daemon.test_cluster import converged
from tests.daemon_process import DaemonProcess
from tests.lazy_sdk import openai

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("images")]

FAST: dict[str, Any] = {"advanced_params": {"num_inference_steps": 1, "seed": 7, "guidance": 1.0}}
SIZE = (64, 64)
"""``size: auto`` on the test model (its card's architecture renders 64x64 natively)."""
PNG: bytes = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def daemon(
    tiny_image_model: str, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    node = DaemonProcess(
        root=tmp_path_factory.mktemp("images-daemon"),
        models_dir=shared_models_dir,
        extra_env={"SKULK_ENABLE_IMAGE_MODELS": "true"},
    )
    node.start()
    try:
        place(node, model_id=tiny_image_model)
        yield node
    finally:
        node.kill()


_clients: list[Any] = []


@pytest.fixture(scope="module", autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        _clients.pop().close()


def sdk(daemon: DaemonProcess) -> Any:
    """The official SDK on ``daemon`` (closed when the module ends)."""
    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", timeout=300)
    _clients.append(client)
    return client


def picture(data: bytes) -> tuple[str, tuple[int, int]]:
    from PIL import Image  # noqa: PLC0415

    image = Image.open(io.BytesIO(data))
    return str(image.format), image.size


def test_generate_b64_renders_n_seeded_pngs(daemon: DaemonProcess, tiny_image_model: str) -> None:
    client = sdk(daemon)
    first = client.images.generate(model=tiny_image_model, prompt="a fox", n=2, extra_body=FAST)
    images = [base64.b64decode(datum.b64_json) for datum in first.data]
    assert [picture(image) for image in images] == [("PNG", SIZE)] * 2
    assert images[0] != images[1]  # image i renders with seed + i
    assert first.model_extra["seed"] == 7
    again = client.images.generate(model=tiny_image_model, prompt="a fox", n=1, extra_body=FAST)
    assert base64.b64decode(again.data[0].b64_json) == images[0]
    unseeded = client.images.generate(
        model=tiny_image_model,
        prompt="a fox",
        output_format="jpeg",
        extra_body={"advanced_params": {"num_inference_steps": 1, "guidance": 1.0}},
    )
    assert isinstance(unseeded.model_extra["seed"], int)  # assigned by the node
    assert picture(base64.b64decode(unseeded.data[0].b64_json)) == ("JPEG", SIZE)


def test_url_answers_are_stored_on_the_api_node(
    daemon: DaemonProcess, tiny_image_model: str
) -> None:
    client = sdk(daemon)
    made = client.images.generate(
        model=tiny_image_model,
        prompt="a fox",
        response_format="url",
        output_format="webp",
        extra_body=FAST,
    )
    url = made.data[0].url
    assert url.startswith(f"{daemon.url}/images/")
    fetched = httpx.get(url, timeout=30)
    assert fetched.status_code == 200
    assert fetched.headers["content-type"] == "image/webp"
    assert picture(fetched.content) == ("WEBP", SIZE)
    listed = httpx.get(f"{daemon.url}/images", timeout=30).json()["data"]
    entry = next(item for item in listed if item["url"] == url)
    assert entry["content_type"] == "image/webp"
    assert 3500 < entry["expires_at"] - time.time() <= 3600


def test_edit_with_the_sdk(daemon: DaemonProcess, tiny_image_model: str) -> None:
    from PIL import Image  # noqa: PLC0415

    source = io.BytesIO()
    Image.new("RGB", (300, 200), (200, 40, 40)).save(source, format="PNG")
    client = sdk(daemon)
    edited = client.images.edit(
        model=tiny_image_model,
        image=("input.png", source.getvalue(), "image/png"),
        prompt="make it snow",
        extra_body={"advanced_params": '{"num_inference_steps": 2, "seed": 3, "guidance": 1.0}'},
    )
    assert picture(base64.b64decode(edited.data[0].b64_json)) == ("PNG", SIZE)
    bad = httpx.post(
        f"{daemon.url}/v1/images/edits",
        data={"model": tiny_image_model, "prompt": "make it snow"},
        files={"image": ("input.png", b"not a picture", "image/png")},
        timeout=60,
    )
    assert bad.status_code == 400
    assert "could not be read" in bad.json()["error"]["message"]


def test_a_partial_image_stream(daemon: DaemonProcess, tiny_image_model: str) -> None:
    client = sdk(daemon)
    stream = client.images.generate(
        model=tiny_image_model,
        prompt="a fox",
        stream=True,
        partial_images=1,
        extra_body={"advanced_params": {"num_inference_steps": 2, "seed": 1, "guidance": 1.0}},
    )
    events = list(stream)
    kinds = [event.type for event in events]
    assert kinds == ["image_generation.partial_image", "image_generation.completed"]
    assert events[0].partial_image_index == 0
    for event in events:
        assert picture(base64.b64decode(event.b64_json))[0] == "PNG"
    # The engine's preview hook outlives the render that set it: the next render,
    # without previews, must not call into it (it once crashed the runner).
    after = client.images.generate(model=tiny_image_model, prompt="a fox", extra_body=FAST)
    assert picture(base64.b64decode(after.data[0].b64_json)) == ("PNG", SIZE)


def test_cancel_ends_a_render_before_its_next_image(
    daemon: DaemonProcess, tiny_image_model: str
) -> None:
    body = {
        "model": tiny_image_model,
        "prompt": "a fox",
        "n": 4,
        "stream": True,
        "partial_images": 1,
        "advanced_params": {"num_inference_steps": 2, "seed": 5, "guidance": 1.0},
    }
    with httpx.stream(
        "POST", f"{daemon.url}/v1/images/generations", json=body, timeout=120
    ) as response:
        assert response.status_code == 200
        command_id = response.headers["x-skulk-command-id"]
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data:"))
        assert "image_generation.partial_image" in first
        cancelled = httpx.post(f"{daemon.url}/v1/cancel/{command_id}", timeout=30)
        assert cancelled.status_code == 200, cancelled.text
        rest = [line for line in lines if line.startswith("data:")]
    assert rest and '"type":"error"' in rest[-1] and "cancelled" in rest[-1]
    assert not any("image_generation.completed" in line for line in rest)


def test_bench_answers_stats_and_power(daemon: DaemonProcess, tiny_image_model: str) -> None:
    response = httpx.post(
        f"{daemon.url}/bench/images/generations",
        json={"model": tiny_image_model, "prompt": "a fox", "stream": True, **FAST},
        timeout=300,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["data"]) == 1 and body["data"][0]["b64_json"]
    stats = body["generation_stats"]
    assert stats["steps"] == 1 and stats["images"] == 1
    assert stats["render_seconds"] > 0
    assert "power_usage" in body


def test_skulk_image_writes_the_file(daemon: DaemonProcess, tmp_path: Path) -> None:
    output = tmp_path / "fox.png"
    result = CliRunner().invoke(
        app,
        ["--api-url", daemon.url, "image", "a fox", "-o", str(output), "--steps", "2", "--json"],
        env={"COLUMNS": "120"},
        prog_name="skulk",
    )
    assert result.exit_code == 0, result.output
    assert picture(output.read_bytes()) == ("PNG", SIZE)
    assert str(output) in result.output


# -- another node's API ------------------------------------------------------------------


@pytest.fixture(scope="module")
def peer(
    daemon: DaemonProcess, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    """A second node joining the first: the image instance stays on the first."""
    node = DaemonProcess(
        root=tmp_path_factory.mktemp("images-peer"),
        models_dir=shared_models_dir,
        peers=[daemon.fabric_address],
        extra_env={"SKULK_ENABLE_IMAGE_MODELS": "true"},
    )
    node.start()
    try:
        wait_for(lambda: converged([daemon, node], 2), "two nodes to converge", timeout=90)
        yield node
    finally:
        node.kill()


def test_another_nodes_api_renders_on_the_serving_node(
    daemon: DaemonProcess, peer: DaemonProcess, tiny_image_model: str
) -> None:
    client = sdk(peer)
    made = client.images.generate(
        model=tiny_image_model,
        prompt="a fox",
        response_format="url",
        extra_body=FAST,
    )
    url = made.data[0].url
    assert url.startswith(f"{peer.url}/images/")  # stored on the API node that answered
    assert picture(httpx.get(url, timeout=30).content) == ("PNG", SIZE)
    local = sdk(daemon).images.generate(model=tiny_image_model, prompt="a fox", extra_body=FAST)
    remote = client.images.generate(model=tiny_image_model, prompt="a fox", extra_body=FAST)
    assert base64.b64decode(remote.data[0].b64_json) == base64.b64decode(local.data[0].b64_json)
    stream = client.images.generate(
        model=tiny_image_model,
        prompt="a fox",
        stream=True,
        partial_images=1,
        extra_body={"advanced_params": {"num_inference_steps": 2, "seed": 1, "guidance": 1.0}},
    )
    assert [event.type for event in stream] == [
        "image_generation.partial_image",
        "image_generation.completed",
    ]
    from PIL import Image  # noqa: PLC0415

    source = io.BytesIO()
    Image.new("RGB", (64, 64), (10, 200, 10)).save(source, format="PNG")
    edited = client.images.edit(
        model=tiny_image_model,
        image=("input.png", source.getvalue(), "image/png"),
        prompt="make it snow",
        extra_body={"advanced_params": '{"num_inference_steps": 2, "seed": 3, "guidance": 1.0}'},
    )
    assert picture(base64.b64decode(edited.data[0].b64_json)) == ("PNG", SIZE)
