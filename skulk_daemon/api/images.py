"""``POST /v1/images/generations`` and ``/v1/images/edits``: admission only, for now.

The routes are always registered, as the spec says. This node has no image
engine yet, so no image model can be placed and every request ends in the
spec's 404 (``No instance found``) after its body has been checked: a missing
``model`` or ``prompt`` is a 400, whatever the model.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, post

from skulk_daemon.errors import ApiError

MAX_IMAGE_EDIT_BODY_BYTES = 32 * 1024 * 1024


async def _fields(request: Request[Any, Any, Any]) -> dict[str, Any]:
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await request.form()
        return {key: form.get(key) for key in ("model", "prompt")}
    try:
        payload = msgspec.json.decode(await request.body())
    except msgspec.DecodeError as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_request")
    return payload


async def refuse_image_request(request: Request[Any, Any, Any]) -> None:
    """Validate an image request's body, then answer as an unplaced model does."""
    fields = await _fields(request)
    model, prompt = fields.get("model"), fields.get("prompt")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "model is required", code="invalid_request")
    if not isinstance(prompt, str) or not prompt:
        raise ApiError(400, "prompt is required", code="invalid_request")
    raise ApiError(404, f"No instance found for model {model}", code="model_not_found")


class ImagesController(Controller):
    tags = ("Images",)

    @post(
        ["/v1/images/generations", "/v1/images/edits"],
        status_code=200,
        summary="Generate or edit images with a placed image model",
        request_max_body_size=MAX_IMAGE_EDIT_BODY_BYTES,
    )
    async def images(self, request: Request[Any, Any, Any]) -> None:
        await refuse_image_request(request)
