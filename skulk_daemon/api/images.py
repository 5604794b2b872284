"""``POST /v1/images/generations`` and ``/v1/images/edits``: admission only, for now.

The routes are always registered, as the spec says. This node has no image
engine yet, so no image model can be placed and every request ends in the
spec's 404 (``No instance found``) after its body has been checked: a missing
``model`` or ``prompt`` is a 400, whatever the model.
"""

from __future__ import annotations

import msgspec
from litestar import Controller, post

from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.openapi import JSON, OPENAI, documented, errors
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import ApiError

MAX_IMAGE_EDIT_BODY_BYTES = 32 * 1024 * 1024


class ImageRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The fields admission checks; others are accepted and not read yet."""

    model: str
    prompt: str


IMAGE_DOC = documented(body=ImageRequest, body_media_types=(JSON, "multipart/form-data"))
IMAGE_NEVER_SUCCEEDS = "Never given yet: no image engine exists, so every valid request ends in 404"


async def _fields(request: HttpRequest) -> dict[str, object]:
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


async def refuse_image_request(request: HttpRequest) -> None:
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
    opt = declare(Requirement.OPEN)

    @post(
        ["/v1/images/generations", "/v1/images/edits"],
        # Edits take multipart form data (the image), as OpenAI's do.
        opt=declare(Requirement.OPEN, json_body=False),
        status_code=200,
        summary="Generate or edit images with a placed image model",
        request_max_body_size=MAX_IMAGE_EDIT_BODY_BYTES,
        response_description=IMAGE_NEVER_SUCCEEDS,
        responses=errors(OPENAI, 400, 404, 413),
        operation_class=IMAGE_DOC,
    )
    async def images(self, request: HttpRequest) -> None:
        await refuse_image_request(request)
