"""The Ollama-compatible group under ``/ollama``.

Clients join a configured base URL with API paths in different ways, so every
route is also served under ``/ollama/api/api/...`` and ``/ollama/api/v1/...``.
Errors leave this group in Ollama's shape, ``{"error": "message"}``, with the
status the spec names.
"""

from __future__ import annotations

import logging
import time
from typing import Final

import msgspec
from litestar import Controller, MediaType, Response, get, head, post
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.spec import Operation
from litestar.response import Stream
from litestar.types import ExceptionHandlersMap, Method
from litestar.types.internal_types import PathParameterDefinition

from skulk_core.version import SKULK_VERSION
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.ollama_models import (
    OllamaPs,
    OllamaShow,
    OllamaTags,
    OllamaVersion,
    find,
    running,
    show,
    tags,
)
from skulk_daemon.api.ollama_replies import OllamaChatReply, OllamaGenerateReply
from skulk_daemon.api.openapi import (
    COMMAND_ID_HEADER,
    JSON,
    OLLAMA,
    OllamaError,
    documented,
    errors,
    json_of,
    lines_of,
)
from skulk_daemon.api.streaming import BodyStream
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.chat.ollama_request import (
    OllamaChatRequest,
    OllamaGenerateRequest,
    OllamaShowRequest,
    chat_to_task,
    decode_chat,
    decode_generate,
    decode_show,
    generate_to_task,
    is_load_probe,
    keep_alive,
)
from skulk_daemon.chat.ollama_wire import (
    NDJSON,
    Reply,
    ReplyKind,
    json_body,
    line,
    load_probe,
    ndjson_stream,
)
from skulk_daemon.chat.service import ChatService, OpenedTurn
from skulk_daemon.chat.task import ChatTask, TaskMessage
from skulk_daemon.errors import ApiError, nested_too_deeply
from skulk_daemon.node.node import CommandRefused, Node
from skulk_daemon.placement.idle_clocks import IdleClocks

log = logging.getLogger(__name__)

PREFIXES: Final = ("/ollama/api", "/ollama/api/api", "/ollama/api/v1")
"""The canonical prefix, then the aliases for clients that add ``/api`` or ``/v1``."""
MAX_OLLAMA_BODY_BYTES: Final = 48 * 1024 * 1024
"""Images are bounded at 32 MiB decoded; Ollama sends them as base64 (4/3 larger)."""
RUNNING_TEXT: Final = "Ollama is running"

_STATUS_BY_REFUSAL: Final = {"not_found": 404, "instance_exists": 409}


def _paths(name: str) -> list[str]:
    return [f"{prefix}/{name}" for prefix in PREFIXES]


def _operation_id(
    handler: HTTPRouteHandler, method: Method, components: list[str | PathParameterDefinition]
) -> str:
    # NOTE: Litestar's default id skips a path component it has already seen, so
    # /ollama/api/api/chat would collide with /ollama/api/chat; every alias needs
    # its own id, so every component counts here.
    words = [c if isinstance(c, str) else c.name for c in components]
    words += [method.lower(), *handler.handler_name.split("_")]
    return "".join(word.title() for word in words)


def _reply_doc(body: type[msgspec.Struct], reply: type[msgspec.Struct]) -> type[Operation]:
    late = "after the first line, a failure is an error line in place of the rest"
    return documented(
        body=body,
        ok={
            NDJSON: lines_of(
                reply,
                OllamaError,
                description=f"`stream: true` (the default): one object per line; {late}",
            ),
            JSON: json_of(
                reply, OllamaError, description="`stream: false`: the whole answer, or the error"
            ),
        },
        headers=COMMAND_ID_HEADER,
    )


def _error(
    status: int, message: str, headers: dict[str, str] | None = None
) -> Response[dict[str, str]]:
    return Response(
        {"error": message}, status_code=status, media_type=MediaType.JSON, headers=headers
    )


def _on_api_error(_: HttpRequest, exc: ApiError) -> Response[dict[str, str]]:
    return _error(exc.status_code, exc.message, exc.headers)


def _on_refused(_: HttpRequest, exc: CommandRefused) -> Response[dict[str, str]]:
    return _error(_STATUS_BY_REFUSAL.get(exc.code, 400), exc.message)


def _on_http(_: HttpRequest, exc: HTTPException) -> Response[dict[str, str]]:
    return _error(exc.status_code, exc.detail, dict(exc.headers or {}))


def _on_too_deep(request: HttpRequest, _: RecursionError) -> Response[dict[str, str]]:
    return _on_api_error(request, nested_too_deeply())


def _on_unexpected(_: HttpRequest, exc: Exception) -> Response[dict[str, str]]:
    log.exception("unhandled error while serving an Ollama request", exc_info=exc)
    return _error(500, "internal error; see the node's log")


# Litestar picks the most specific class along the exception's MRO.
OLLAMA_EXCEPTION_HANDLERS: Final[ExceptionHandlersMap] = {
    ApiError: _on_api_error,
    CommandRefused: _on_refused,
    HTTPException: _on_http,
    RecursionError: _on_too_deep,
    Exception: _on_unexpected,
}


def _resolved(chat: ChatService, name: str) -> str:
    """The catalog id ``name`` stands for (``:latest`` dropped), else ``name``."""
    entry = find(chat.catalog(), name)
    return entry.model_id if entry is not None else name


def _respond(
    *, kind: ReplyKind, name: str, turn: OpenedTurn, stream: bool, started_ns: int
) -> Stream:
    admitted = turn.admitted
    reply = Reply(
        kind=kind,
        model=name,
        started_ns=started_ns,
        logprobs=admitted.generation.sampling.logprobs,
    )
    headers = {"X-Skulk-Command-Id": admitted.command_id}
    if stream:
        body = ndjson_stream(reply, turn.events)
        return BodyStream(turn.respond(body), media_type=NDJSON, headers=headers)
    body = json_body(reply, turn.events)
    return BodyStream(turn.respond(body), media_type=MediaType.JSON, headers=headers)


class OllamaController(Controller):
    tags = ("Ollama",)
    # Ollama's own server reads the body as JSON whatever its Content-Type, and the
    # clients written for it (and `curl -d`) rely on that; see untyped_json.
    opt = declare(Requirement.OPEN, untyped_json=True)
    exception_handlers = OLLAMA_EXCEPTION_HANDLERS

    @post(
        _paths("chat"),
        operation_id=_operation_id,
        status_code=200,
        summary="Ollama chat (NDJSON stream by default)",
        request_max_body_size=MAX_OLLAMA_BODY_BYTES,
        responses=errors(OLLAMA, 400, 404, 413, 503),
        operation_class=_reply_doc(OllamaChatRequest, OllamaChatReply),
    )
    async def chat(
        self,
        request: HttpRequest,
        chat: ChatService,
    ) -> Response[bytes] | Stream:
        started_ns = time.monotonic_ns()
        body = decode_chat(await request.body())
        model = _resolved(chat, body.model)
        if not body.messages and keep_alive(body) == 0:
            # Ollama's unload: an empty chat with keep_alive 0 generates nothing.
            chat.keep_alive(model, 0)
            probe = line(load_probe("chat", body.model, unload=True))
            return Response(probe, media_type=NDJSON if body.stream else MediaType.JSON)
        task = chat_to_task(body, model)
        turn = await chat.open_turn(task, keep_alive=keep_alive(body))
        return _respond(
            kind="chat", name=body.model, turn=turn, stream=body.stream, started_ns=started_ns
        )

    @post(
        _paths("generate"),
        operation_id=_operation_id,
        status_code=200,
        summary="Ollama generate (NDJSON stream by default)",
        request_max_body_size=MAX_OLLAMA_BODY_BYTES,
        responses=errors(OLLAMA, 400, 404, 413, 503),
        operation_class=_reply_doc(OllamaGenerateRequest, OllamaGenerateReply),
    )
    async def generate(
        self,
        request: HttpRequest,
        chat: ChatService,
    ) -> Response[bytes] | Stream:
        started_ns = time.monotonic_ns()
        body = decode_generate(await request.body())
        model = _resolved(chat, body.model)
        keep = keep_alive(body)
        if is_load_probe(body):
            media_type = NDJSON if body.stream else MediaType.JSON
            if keep == 0:
                # Ollama's unload: the model's on-demand instances go once idle.
                chat.keep_alive(model, 0)
                return Response(
                    line(load_probe("generate", body.model, unload=True)), media_type=media_type
                )
            # Admission decides whether the model is served (404 if not placed, unless
            # it is loaded on demand); nothing is dispatched, so nothing is generated.
            await chat.admit(
                ChatTask(model=model, messages=(TaskMessage(role="user"),)), keep_alive=keep
            )
            if not isinstance(keep, msgspec.UnsetType):
                chat.keep_alive(model, keep)
            return Response(line(load_probe("generate", body.model)), media_type=media_type)
        turn = await chat.open_turn(generate_to_task(body, model), keep_alive=keep)
        return _respond(
            kind="generate", name=body.model, turn=turn, stream=body.stream, started_ns=started_ns
        )

    @get(
        _paths("tags"),
        operation_id=_operation_id,
        summary="Models whose downloads are complete",
        responses=errors(OLLAMA),
    )
    async def list_tags(self, node: Node) -> OllamaTags:
        return tags(node.catalog(), node.state)

    @post(
        _paths("show"),
        operation_id=_operation_id,
        status_code=200,
        summary="One model's details",
        responses=errors(OLLAMA, 400, 404, 413),
        operation_class=documented(body=OllamaShowRequest, body_required=False),
    )
    async def show_model(self, request: HttpRequest, node: Node) -> OllamaShow:
        body = decode_show(await request.body())
        name = body.name or body.model
        if not name:
            raise ApiError(400, "name or model is required", code="invalid_request")
        entry = find(node.catalog(), name)
        if entry is None:
            raise ApiError(404, f"model {name!r} not found", code="model_not_found")
        return show(entry)

    @get(
        _paths("ps"),
        operation_id=_operation_id,
        summary="Models with a placed instance",
        responses=errors(OLLAMA),
    )
    async def list_running(self, node: Node, idle_clocks: IdleClocks) -> OllamaPs:
        return running(node.catalog(), node.state, idle_clocks.expires_at())

    @get(
        _paths("version"),
        operation_id=_operation_id,
        summary="The Skulk version (a compatibility probe)",
        responses=errors(OLLAMA),
    )
    async def version(self) -> OllamaVersion:
        return OllamaVersion(version=SKULK_VERSION)

    @head(
        [*_paths("version"), "/ollama"],
        operation_id=_operation_id,
        status_code=200,
        summary="Version probe",
        responses=errors(OLLAMA),
    )
    async def probe(self) -> None:
        return None

    @get(
        "/ollama",
        media_type=MediaType.TEXT,
        summary="Ollama's liveness text",
        responses=errors(OLLAMA),
    )
    async def root(self) -> str:
        return RUNNING_TEXT
