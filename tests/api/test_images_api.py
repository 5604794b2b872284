"""The image routes' refusals, catalog visibility and stored-image expiry, on the real
app in-process (tests/images/test_images_daemon.py renders with a real daemon)."""

from __future__ import annotations

import pytest

from skulk_daemon.errors import ApiError
from skulk_daemon.images.protocol import MAX_EDIT_IMAGE_BYTES
from skulk_daemon.images.store import IMAGE_LIFETIME_SECONDS, ImageStore
from tests.api.in_process import AppFactory, AppNode
from tests.images.conftest import tiny_image_model

__all__ = ["tiny_image_model"]  # the fixture, imported for this module's tests

FOX = {"model": "local/sdxs-tiny-random", "prompt": "a fox in the snow"}


def error_of(response: object) -> tuple[int, str, str]:
    import httpx  # noqa: PLC0415

    assert isinstance(response, httpx.Response)
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"prompt": ""}, "prompt is required"),
        ({"model": ""}, "model is required"),
        ({"n": 0}, "n must be between 1 and 10"),
        ({"n": 11}, "n must be between 1 and 10"),
        ({"size": "640x480"}, "size must be one of"),
        ({"quality": "ultra"}, "quality must be one of"),
        ({"output_format": "gif"}, "output_format must be one of"),
        ({"response_format": "file"}, "response_format must be one of"),
        ({"partial_images": 4, "stream": True}, "partial_images must be between 0 and 3"),
        ({"partial_images": 1}, "partial_images needs stream=true"),
        ({"advanced_params": {"num_inference_steps": 0}}, "between 1 and 100"),
        ({"advanced_params": {"num_inference_steps": 101}}, "between 1 and 100"),
        ({"advanced_params": {"guidance": 0.5}}, "between 1.0 and 20.0"),
        ({"advanced_params": {"guidance": 20.5}}, "between 1.0 and 20.0"),
        ({"advanced_params": {"num_sync_steps": 0}}, "num_sync_steps"),
        ({"advanced_params": {"seed": -1}}, "seed must be between"),
        ({"advanced_params": {"sampler": "euler"}}, "unknown field"),
    ],
)
def test_bad_generation_fields_are_400_naming_the_field(
    bare_app: AppNode, change: dict[str, object], words: str
) -> None:
    for path in ("/v1/images/generations", "/bench/images/generations"):
        response = bare_app.post(path, json={**FOX, **change})
        status, _, message = error_of(response)
        if path.startswith("/bench") and "stream" in words:
            # A bench run never streams: partial_images is set to 0, not refused.
            assert status == 404
            continue
        assert status == 400, response.text
        assert words in message


def test_an_unplaced_model_is_404_and_stored_ids_are_404(bare_app: AppNode) -> None:
    status, code, message = error_of(bare_app.post("/v1/images/generations", json=FOX))
    assert (status, code) == (404, "model_not_found")
    assert message == "No instance found for model local/sdxs-tiny-random"
    missing = bare_app.get("/images/img_not-a-real-one")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "Image not found or expired"
    assert bare_app.get("/images").json() == {"object": "list", "data": []}


def test_edit_uploads_are_bounded_at_24_mib_and_must_be_files(bare_app: AppNode) -> None:
    big = b"\0" * (MAX_EDIT_IMAGE_BYTES + 1)
    for path in ("/v1/images/edits", "/bench/images/edits"):
        response = bare_app.post(path, data=FOX, files={"image": ("big.png", big, "image/png")})
        status, code, _ = error_of(response)
        assert (status, code) == (413, "upload_too_large")
    response = bare_app.post("/v1/images/edits", data={**FOX, "image": "/etc/passwd"})
    assert error_of(response)[0] == 400
    response = bare_app.post("/v1/images/edits", data=FOX)
    assert "multipart/form-data" in error_of(response)[2]
    response = bare_app.post("/v1/images/edits", data=FOX, files={"n": (None, "1")})
    assert "image is required" in error_of(response)[2]
    files = {"image": ("fox.png", b"\x89PNG", "image/png")}
    fidelity = bare_app.post(
        "/v1/images/edits", data={**FOX, "input_fidelity": "exact"}, files=files
    )
    assert "input_fidelity must be one of" in error_of(fidelity)[2]
    masked = bare_app.post(
        "/v1/images/edits", data=FOX, files={**files, "mask": ("m.png", b"x", "image/png")}
    )
    assert "mask is not supported" in error_of(masked)[2]


def test_image_models_are_listed_only_when_enabled(
    tiny_image_model: str, make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SKULK_ENABLE_IMAGE_MODELS", raising=False)
    app = make_app()
    listed = [model["id"] for model in app.get("/v1/models").json()["data"]]
    assert tiny_image_model not in listed
    previews = app.get("/instance/previews", params={"model_id": tiny_image_model})
    assert previews.status_code == 404
    monkeypatch.setenv("SKULK_ENABLE_IMAGE_MODELS", "true")
    shown = {model["id"]: model for model in app.get("/v1/models").json()["data"]}
    assert "image" in shown[tiny_image_model]["capabilities"]


def test_a_stored_image_expires_after_one_hour(tmp_path: object) -> None:
    from pathlib import Path  # noqa: PLC0415

    assert isinstance(tmp_path, Path)
    now = [1_000.0]
    store = ImageStore(tmp_path, clock=lambda: now[0])
    stored = store.put(b"\x89PNG picture", "image/png", "png")
    assert store.get(stored.image_id) is not None
    assert [image.image_id for image in store.live()] == [stored.image_id]
    now[0] += IMAGE_LIFETIME_SECONDS - 1
    assert store.get(stored.image_id) is not None
    now[0] += 1
    assert store.get(stored.image_id) is None
    assert store.live() == []
    assert not stored.path.exists()


def test_expired_is_what_the_route_says(tmp_path: object) -> None:
    from pathlib import Path  # noqa: PLC0415

    from skulk_daemon.images.service import ImageService  # noqa: PLC0415

    assert isinstance(tmp_path, Path)
    service = ImageService.__new__(ImageService)
    service.store = ImageStore(tmp_path, lifetime=0)
    stored = service.store.put(b"x", "image/png", "png")
    with pytest.raises(ApiError) as refused:
        service.stored_image(stored.image_id)
    assert refused.value.status_code == 404
    assert str(refused.value) == "Image not found or expired"
