"""What ``/api/openapi.json`` says beyond what Litestar reads off handler signatures.

- The three error envelopes (OpenAI's ``{"error": {"message", "type", "code"}}``,
  Anthropic's ``{"type": "error", "error": {...}}`` on ``/v1/messages``, Ollama's
  ``{"error": "..."}`` on ``/ollama/*``) and :func:`errors`, which builds a route's
  ``responses=`` in its surface's envelope. Listing 400 there also replaces the
  ``{"detail", "status_code", "extra"}`` shape Litestar documents by default: the API
  never answers in it.
- :func:`documented`, an ``operation_class`` for the routes Litestar cannot see into:
  those that read their body themselves (so that their decoder picks the error codes)
  and those that stream or render with ``to_wire``. It names the request Struct and the
  success body per media type: JSON (:func:`json_of`, :func:`wire_of`), server-sent
  events (:func:`sse_of`, one event as OpenAPI 3.2's ``itemSchema`` models it) or
  NDJSON (:func:`lines_of`).
- :func:`complete`, which attaches those Structs' schemas, made by
  ``msgspec.json.schema_components`` (the decoder's and encoder's own view), to the
  document Litestar built; :func:`complete_when_built` runs it when Litestar builds the
  document, on its first request (about a CPU-second a node start would otherwise
  pay). ``to_wire`` renderings differ from msgspec's (tagged Structs are externally
  tagged), so theirs come from :mod:`~skulk_daemon.api.wire_schema`, named with a
  ``Wire`` prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, ClassVar, Final, Literal, cast

import msgspec
from litestar import Litestar
from litestar._openapi.plugin import OpenAPIPlugin
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import (
    OpenAPI,
    OpenAPIFormat,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Reference,
    RequestBody,
    Schema,
)

from skulk_daemon.api.wire_schema import wire_schema_components

JSON: Final = "application/json"
SSE: Final = "text/event-stream"
COMPONENTS: Final = "#/components/schemas/"


class OpenAIErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    type: str
    code: str | None


class OpenAIError(msgspec.Struct, frozen=True, kw_only=True):
    """OpenAI's error envelope: every route outside ``/v1/messages`` and ``/ollama``."""

    error: OpenAIErrorDetail


class ClaudeErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    message: str


class ClaudeError(msgspec.Struct, frozen=True, kw_only=True):
    """Anthropic's error envelope, on ``/v1/messages``."""

    type: Literal["error"]
    error: ClaudeErrorDetail


class OllamaError(msgspec.Struct, frozen=True, kw_only=True):
    """Ollama's error envelope, on ``/ollama/*``."""

    error: str


@dataclass(frozen=True, slots=True)
class Surface:
    """One API surface's error envelope."""

    envelope: type[msgspec.Struct]


OPENAI: Final = Surface(OpenAIError)
CLAUDE: Final = Surface(ClaudeError)
OLLAMA: Final = Surface(OllamaError)

ENVELOPES: Final = frozenset({OpenAIError, ClaudeError, OllamaError})

_MEANING: Final = {
    400: "Malformed or refused request; `code` says which rule it broke",
    401: "Missing or invalid credentials",
    403: "The caller may not do this here",
    404: "The named model, instance, command or resource does not exist here",
    409: "Conflicts with the current state",
    413: "The body exceeds this route's size bound",
    415: "The body is not JSON (send Content-Type: application/json)",
    421: "The Host header does not name this node",
    422: "Well-formed, but a value is out of range or unsupported",
    429: "Too many attempts; see `Retry-After`",
    499: "The client went away before the answer (nobody reads this)",
    500: "Internal error; see the node's log",
    502: "An upstream service failed",
    503: "Not available right now (no master, runner down, or not configured); retry",
    504: "Timed out",
}


AUTHORITY_STATUSES: Final = (401, 403, 415, 421)
"""What the request-authority guard may answer on any route (api/authority.py)."""


class _SharedResponseSpec(ResponseSpec):
    """A :class:`ResponseSpec` nothing mutates, so the copies Litestar makes of every
    handler as the app is built (``Controller.as_router`` deep-copies each) share it
    instead of copying it: a tenth of building the app (issue 43)."""

    def __deepcopy__(self, memo: dict[int, object]) -> _SharedResponseSpec:
        return self


def errors(surface: Surface, *statuses: int) -> dict[int, ResponseSpec]:
    """``responses=`` for a route: each of ``statuses`` in ``surface``'s envelope, plus
    the authority guard's refusals and 500, which any route can give."""
    return {
        status: _SharedResponseSpec(
            data_container=surface.envelope,
            generate_examples=False,
            description=_MEANING.get(status) or HTTPStatus(status).phrase,
        )
        for status in sorted({*statuses, *AUTHORITY_STATUSES, 500})
    }


ContentKind = Literal["json", "wire", "sse", "lines", "raw"]
TypeForm = Any
"""What msgspec can describe: a Struct, or a container of them (``list[Event]``)."""


@dataclass(frozen=True, slots=True)
class Content:
    """One media type of a success response, whose documents (or stream items) are
    one of ``types``."""

    kind: ContentKind
    types: tuple[TypeForm, ...]
    description: str
    done: str | None = None
    """SSE: the ``data`` of the stream's last event, which is not JSON (``[DONE]``)."""
    binary: bool = False
    """Raw: bytes (audio) rather than text."""


def json_of(*types: TypeForm, description: str = "") -> Content:
    return Content("json", types, description)


def wire_of(*types: TypeForm, description: str = "") -> Content:
    """A JSON document :func:`skulk_core.wire.to_wire` rendered from one of ``types``
    (tagged Structs externally tagged)."""
    return Content("wire", types, description)


def sse_of(*types: TypeForm, description: str, done: str | None = None) -> Content:
    """Server-sent events whose ``data`` is JSON, one of ``types`` (any JSON object when
    none is named)."""
    return Content("sse", types, description, done)


def raw_of(*, description: str, binary: bool) -> Content:
    """A body that is not JSON: bytes (audio) or text (a transcript, subtitles)."""
    return Content("raw", (), description, binary=binary)


def lines_of(*types: TypeForm, description: str) -> Content:
    """Newline-delimited JSON, each line one of ``types``."""
    return Content("lines", types, description)


@dataclass
class LinesMediaType(OpenAPIMediaType):
    """Newline-delimited JSON: text, each line of which matches ``x-item-schema``
    (OpenAPI 3.2's ``itemSchema``; this document is 3.1)."""

    item_schema: Schema | Reference | None = field(
        default=None, metadata={"alias": "x-item-schema"}
    )


class DocumentedOperation(Operation):
    """An operation whose request body and success content :func:`complete` fills in."""

    request: ClassVar[tuple[type[msgspec.Struct], ...]] = ()
    """The body is one of these."""
    request_media_types: ClassVar[tuple[str, ...]] = (JSON,)
    request_required: ClassVar[bool] = True
    success: ClassVar[Mapping[str, Content]] = {}
    success_headers: ClassVar[Mapping[str, str]] = {}
    """Response header name → what it carries."""


def documented(
    *,
    body: type[msgspec.Struct] | tuple[type[msgspec.Struct], ...] = (),
    body_media_types: Sequence[str] = (JSON,),
    body_required: bool = True,
    ok: Mapping[str, Content] | None = None,
    headers: Mapping[str, str] | None = None,
) -> type[Operation]:
    """An ``operation_class`` documenting ``body`` as the request (decoded by the
    handler itself) and ``ok`` as the success response's content per media type."""
    attributes: dict[str, Any] = {
        "request": body if isinstance(body, tuple) else (body,),
        "request_media_types": tuple(body_media_types),
        "request_required": body_required,
        "success": dict(ok or {}),
        "success_headers": dict(headers or {}),
    }
    return type("DocumentedOperation", (DocumentedOperation,), attributes)


COMMAND_ID_HEADER: Final = {
    "X-Skulk-Command-Id": "The command's id; `POST /v1/cancel/{command_id}` cancels it"
}


def _operations(openapi: OpenAPI) -> list[Operation]:
    methods = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
    return [
        operation
        for item in (openapi.paths or {}).values()
        for operation in (getattr(item, method) for method in methods)
        if operation is not None
    ]


def _litestar_default(response: OpenAPIResponse | Reference) -> bool:
    """Whether ``response`` is the ``{"detail", "status_code"}`` body Litestar documents
    for its own exceptions (the API re-renders those in the surface's envelope)."""
    if not isinstance(response, OpenAPIResponse):
        return False
    media = (response.content or {}).get(JSON)
    schema = media.schema if media is not None else None
    return isinstance(schema, Schema) and schema.required == ["detail", "status_code"]


class _CompletingOpenAPIPlugin(OpenAPIPlugin):
    """Litestar's OpenAPI plugin, which runs :func:`complete` on the document it builds."""

    __slots__ = ()

    def _build_openapi(self) -> OpenAPI:
        document = super()._build_openapi()
        complete(document)
        return document


def complete_when_built(app: Litestar) -> None:
    """Have ``app`` complete its OpenAPI document when it first builds it (the first
    request for ``/api/openapi.json`` or the docs pages): the contract tests build it,
    so a route it cannot describe fails there, not on a user's first request."""
    plugin = app.plugins.get(OpenAPIPlugin)
    # NOTE: Litestar makes its own plugin in Litestar.__init__, with no hook to supply
    # a subclass; the subclass adds no state (empty __slots__), so the swap is safe.
    plugin.__class__ = _CompletingOpenAPIPlugin


def complete(openapi: OpenAPI) -> None:
    """Drop Litestar's unclaimed default error bodies, and attach every
    :class:`DocumentedOperation`'s request body and success content, with their Structs'
    schemas, to ``openapi`` (Litestar's document, built once)."""
    for operation in _operations(openapi):
        # A status Litestar documents by itself that no errors() call claimed: its body
        # would be wrong, and the contract test finds the route if the status is real.
        if operation.responses:
            operation.responses = {
                status: response
                for status, response in operation.responses.items()
                if not _litestar_default(response)
            }
    described = [op for op in _operations(openapi) if isinstance(op, DocumentedOperation)]
    schemas = openapi.components.schemas
    ref_of: dict[tuple[TypeForm, bool], Schema | Reference] = {
        (envelope, False): Reference(ref=COMPONENTS + envelope.__name__)
        for envelope in ENVELOPES
        if envelope.__name__ in schemas  # registered by errors() through Litestar
    }
    for wire in (False, True):
        types = _types(described, wire=wire) - {t for t, _ in ref_of}
        ordered = sorted(types, key=repr)
        prefix = "Wire" if wire else ""
        template = COMPONENTS + prefix + "{name}"
        if wire:
            refs, components = wire_schema_components(
                ordered, schema_hook=_schema_hook, ref_template=template
            )
        else:
            refs, components = msgspec.json.schema_components(
                ordered, schema_hook=_schema_hook, ref_template=template
            )
        components = {prefix + name: schema for name, schema in components.items()}
        clash = {n for n in set(components) & set(schemas) if not _same(schemas[n], components[n])}
        if clash:
            # Two generators describing one name differently would mislead a client.
            raise ValueError(f"OpenAPI components named twice: {sorted(clash)}")
        # A Struct Litestar already describes (inside a success body it reads off a
        # handler's signature) keeps Litestar's description.
        components = {n: schema for n, schema in components.items() if n not in schemas}
        # NOTE: msgspec's schemas are plain JSON Schema dicts; Litestar's serializer
        # passes dicts through as they are.
        schemas.update({name: cast(Schema, schema) for name, schema in components.items()})
        ref_of.update({(t, wire): _schema(r) for t, r in zip(ordered, refs, strict=True)})
    for operation in described:
        _fill(operation, ref_of)


def _same(native: Schema | Reference, generated: Mapping[str, object]) -> bool:
    """Whether Litestar's component and msgspec's describe one Struct (the same fields)."""
    fields = set(native.properties or {}) if isinstance(native, Schema) else None
    properties = generated.get("properties") or {}
    return fields is not None and isinstance(properties, dict) and fields == set(properties)


def _types(operations: list[DocumentedOperation], *, wire: bool) -> set[TypeForm]:
    found: set[TypeForm] = set()
    for operation in operations:
        if not wire:
            found.update(operation.request)
        for content in operation.success.values():
            if (content.kind == "wire") == wire:
                found.update(content.types)
    return found


def _schema_hook(annotation: type) -> dict[str, object]:
    # A field typed ``object`` takes any JSON value (msgspec decodes it as is); the
    # schema must not be empty for msgspec to take it.
    if annotation is object:
        return {"description": "Any JSON value"}
    raise NotImplementedError(f"no JSON schema for {annotation!r}")


Refs = Mapping[tuple[TypeForm, bool], Schema | Reference]


def _schema(generated: Mapping[str, object]) -> Schema | Reference:
    """A top-level schema from msgspec: a reference for a Struct, inline otherwise."""
    ref = generated.get("$ref")
    if set(generated) == {"$ref"} and isinstance(ref, str):
        return Reference(ref=ref)
    return cast(Schema, generated)


def _one_of(types: tuple[TypeForm, ...], ref_of: Refs, *, wire: bool = False) -> Schema | Reference:
    # An envelope is only ever documented natively (errors() registered it).
    refs = [ref_of.get((t, wire)) or ref_of[t, False] for t in types]
    return refs[0] if len(refs) == 1 else Schema(any_of=list(refs))


def _fill(operation: DocumentedOperation, ref_of: Refs) -> None:
    if operation.request:
        schema = _one_of(operation.request, ref_of)
        operation.request_body = RequestBody(
            content={
                media: OpenAPIMediaType(schema=schema) for media in operation.request_media_types
            },
            required=operation.request_required,
        )
    responses = operation.responses = operation.responses or {}
    status = next((code for code in responses if code.startswith("2")), "200")
    if operation.success:
        responses[status] = _success(int(status), operation.success, ref_of)
    ok = responses.get(status)
    if operation.success_headers and isinstance(ok, OpenAPIResponse):
        ok.headers = {
            name: OpenAPIHeader(schema=Schema(type=OpenAPIType.STRING), description=text)
            for name, text in operation.success_headers.items()
        }


def _success(status: int, success: Mapping[str, Content], ref_of: Refs) -> OpenAPIResponse:
    content: dict[str, OpenAPIMediaType] = {}
    notes: list[str] = []
    for media, body in success.items():
        match body.kind:
            case "json" | "wire":
                schema = _one_of(body.types, ref_of, wire=body.kind == "wire")
                content[media] = OpenAPIMediaType(schema=schema)
            case "sse":
                content[media] = OpenAPIMediaType(schema=_event(body, ref_of))
            case "raw":
                content[media] = OpenAPIMediaType(
                    schema=Schema(
                        type=OpenAPIType.STRING,
                        format=OpenAPIFormat.BINARY if body.binary else None,
                        description=body.description,
                    )
                )
            case "lines":
                content[media] = LinesMediaType(
                    schema=Schema(type=OpenAPIType.STRING, description=body.description),
                    item_schema=_one_of(body.types, ref_of),
                )
        if body.description:
            notes.append(f"`{media}`: {body.description}")
    return OpenAPIResponse(
        description="\n\n".join([HTTPStatus(status).phrase, *notes]), content=content
    )


def _event(body: Content, ref_of: Refs) -> Schema:
    """One server-sent event, as OpenAPI 3.2's ``itemSchema`` models it (``event``,
    ``data``). A 3.1 document has no place for the item schema but ``schema``, which is
    where SSE tooling (schemathesis among it) reads an event's schema in 3.1."""
    payload = _one_of(body.types, ref_of) if body.types else Schema(type=OpenAPIType.OBJECT)
    data: Schema = Schema(type=OpenAPIType.STRING, content_media_type=JSON, content_schema=payload)
    if body.done is not None:
        data = Schema(any_of=[Schema(const=body.done), data])
    return Schema(
        type=OpenAPIType.OBJECT,
        description=f"One event of the stream. {body.description}",
        properties={"event": Schema(type=OpenAPIType.STRING), "data": data},
        required=["data"],
    )
