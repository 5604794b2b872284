"""The image routes: ``POST /v1/images/generations`` and ``/v1/images/edits``, and the
images this node stores for ``url`` answers (``GET /images``, ``GET /images/{image_id}``).

A handler reads the body (JSON, or an edit's multipart form), has
:mod:`skulk_daemon.images.admission` check it and :class:`ImageService` run it, and
answers JSON or, with ``stream``, server-sent events (``image_generation.*`` /
``image_edit.*``, ended by the completed images, or an ``error`` event). A client that
disconnects cancels the render.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

import msgspec
from litestar import Controller, Response, get, post
from litestar.datastructures import UploadFile
from litestar.response import Stream

from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.embeddings import unless_disconnected
from skulk_daemon.api.openapi import (
    COMMAND_ID_HEADER,
    JSON,
    OPENAI,
    documented,
    errors,
    json_of,
    raw_of,
    sse_of,
)
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.embeddings.service import STATUS_CANCELLED
from skulk_daemon.errors import ApiError
from skulk_daemon.errors import bad_request as _bad
from skulk_daemon.images.admission import plan_images
from skulk_daemon.images.forms import decode_generation, edit_form
from skulk_daemon.images.protocol import (
    MAX_EDIT_BODY_BYTES,
    MAX_GENERATION_BODY_BYTES,
    CompletedImageEvent,
    ImageGenerationRequest,
    ImagesResponse,
    PartialImageEvent,
    StoredImageList,
)
from skulk_daemon.images.service import AdmittedImages, ImageService

MULTIPART: Final = "multipart/form-data"
_EVENT: Final = msgspec.json.Encoder()

IMAGE_OK: Final = {
    JSON: json_of(ImagesResponse),
    "text/event-stream": sse_of(
        PartialImageEvent,
        CompletedImageEvent,
        description="With stream=true: each partial image, then each finished one",
    ),
}
GENERATION_DOC: Final = documented(
    body=ImageGenerationRequest, ok=IMAGE_OK, headers=COMMAND_ID_HEADER
)
EDIT_DOC: Final = documented(
    body=ImageGenerationRequest,
    body_media_types=(MULTIPART,),
    ok=IMAGE_OK,
    headers=COMMAND_ID_HEADER,
)


class ImageStreamError(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    code: str
    type: str = "invalid_request_error"


class ImageErrorEvent(msgspec.Struct, frozen=True, kw_only=True):
    type: str = "error"
    error: ImageStreamError


async def read_edit(request: HttpRequest, images: ImageService, *, bench: bool) -> AdmittedImages:
    """The edit form, checked and admitted."""
    if not request.headers.get("content-type", "").startswith(MULTIPART):
        raise _bad("this route takes multipart/form-data with the image as an uploaded file")
    form = await request.form()
    fields: dict[str, str] = {}
    files: dict[str, object] = {}
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            files.setdefault(name, value)
        else:
            fields.setdefault(name, str(value))
    edit = await edit_form(fields, files)
    plan = plan_images(
        edit.body,
        edit_image=edit.image,
        editing=True,
        input_fidelity=edit.input_fidelity,
        bench=bench,
    )
    return images.admit(plan, editing=True, bench=bench)


async def read_generation(
    request: HttpRequest, images: ImageService, *, bench: bool
) -> AdmittedImages:
    plan = plan_images(decode_generation(await request.body()), bench=bench)
    return images.admit(plan, editing=False, bench=bench)


async def answer(
    request: HttpRequest, images: ImageService, admitted: AdmittedImages, *, editing: bool
) -> Response[bytes] | Stream:
    headers = {"X-Skulk-Command-Id": str(admitted.command_id)}
    if admitted.plan.stream:
        return Stream(
            _events(images.stream(admitted, editing=editing)),
            media_type="text/event-stream",
            headers={**headers, "Cache-Control": "no-cache"},
        )
    outcome = await unless_disconnected(request, images.render(admitted, str(request.base_url)))
    if outcome is None:
        raise ApiError(STATUS_CANCELLED, "the client disconnected", code="client_disconnected")
    return Response(msgspec.json.encode(outcome[0].response), media_type=JSON, headers=headers)


async def _events(
    events: AsyncIterator[PartialImageEvent | CompletedImageEvent],
) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            yield b"event: " + event.type.encode() + b"\ndata: " + _EVENT.encode(event) + b"\n\n"
    except ApiError as exc:
        failure = ImageErrorEvent(
            error=ImageStreamError(message=exc.message, code=exc.code, type=exc.type)
        )
        yield b"event: error\ndata: " + _EVENT.encode(failure) + b"\n\n"


class ImagesController(Controller):
    tags = ("Images",)
    opt = declare(Requirement.OPEN)

    @post(
        "/v1/images/generations",
        status_code=200,
        summary="Generate images with a placed image model",
        request_max_body_size=MAX_GENERATION_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, STATUS_CANCELLED, 503),
        operation_class=GENERATION_DOC,
    )
    async def generations(
        self, request: HttpRequest, images: ImageService
    ) -> Response[bytes] | Stream:
        admitted = await read_generation(request, images, bench=False)
        return await answer(request, images, admitted, editing=False)

    @post(
        "/v1/images/edits",
        # Edits take multipart form data (the image), as OpenAI's do.
        opt=declare(Requirement.OPEN, json_body=False),
        status_code=200,
        summary="Edit an image with a placed image-to-image model",
        request_max_body_size=MAX_EDIT_BODY_BYTES,
        responses=errors(OPENAI, 400, 404, 413, STATUS_CANCELLED, 503),
        operation_class=EDIT_DOC,
    )
    async def edits(self, request: HttpRequest, images: ImageService) -> Response[bytes] | Stream:
        admitted = await read_edit(request, images, bench=False)
        return await answer(request, images, admitted, editing=True)

    @get("/images", summary="The images this node stores for url answers")
    async def stored(self, request: HttpRequest, images: ImageService) -> StoredImageList:
        return images.stored(str(request.base_url))

    @get(
        "/images/{image_id:str}",
        summary="One stored image's bytes",
        responses=errors(OPENAI, 404),
        operation_class=documented(
            body_required=False,
            ok={
                "image/png": raw_of(description="The stored image", binary=True),
            },
        ),
    )
    async def stored_image(self, image_id: str, images: ImageService) -> Response[bytes]:
        data, content_type = images.stored_image(image_id)
        return Response(data, media_type=content_type)
