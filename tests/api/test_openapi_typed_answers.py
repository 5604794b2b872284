"""Every success body in ``/api/openapi.json`` has a schema a generated client can use.

A handler that returns ``dict[str, Any]`` (or ``object``, or a bare ``Response``)
documents its 2xx body as an empty schema or a bare ``object`` with no properties:
a client (the CLI, a dashboard) cannot rely on any field of it. A typed Struct
answer puts its properties into the document, and the contract test
(``test_openapi_contract.py``) then holds the live answers to them.

Held: every 2xx of every GET, PUT, POST, DELETE and PATCH documented as JSON. Not held:
HEAD probes (no body), a 2xx documented with no content at all (no body; the image
routes' 200 that no engine gives yet), and a 2xx documented only with a non-JSON media
type (raw bytes or a stream: audio, SSE, NDJSON, octet-stream downloads).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import pytest

from tests.api.in_process import AppNode

"""Operations (``METHOD /path``) still answering untyped JSON."""

METHODS: Final = ("get", "put", "post", "delete", "patch")
"""HEAD probes answer no body, so they are not here."""

JSON_MEDIA: Final = ("application/json",)
"""A 2xx documented only with another media type (``application/octet-stream``,
``text/event-stream``, ``audio/*``, ...) answers raw bytes or a stream; its schema is
the bytes' description, not fields, so only JSON answers are held to properties."""


@pytest.fixture(scope="module")
def document(bare_app: AppNode) -> dict[str, Any]:
    response = bare_app.get("/api/openapi.json")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    seen: set[str] = set()
    while isinstance(schema.get("$ref"), str) and schema["$ref"] not in seen:
        seen.add(schema["$ref"])
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = document["components"]["schemas"][name]
    return schema


def typed(document: dict[str, Any], schema: dict[str, Any] | None) -> bool:
    """Whether ``schema`` says something about the body: not empty, not a bare object
    without properties, and (for unions and arrays) every alternative or item typed."""
    if not schema:
        return False
    schema = _resolve(document, schema)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            options = [o for o in schema[key] if _resolve(document, o).get("type") != "null"]
            return bool(options) and all(typed(document, o) for o in options)
    kind = schema.get("type")
    if kind == "array":
        return typed(document, schema.get("items"))
    if kind == "object" or (kind is None and "properties" in schema):
        return bool(schema.get("properties"))
    return kind is not None or "enum" in schema or "const" in schema


def answers(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """(``METHOD /path``, the 2xx JSON schema) for every operation answering JSON."""
    for path, item in document["paths"].items():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            for status, response in operation["responses"].items():
                content = response.get("content") or {}
                if not status.startswith("2") or not content:
                    continue  # no body: 204, or a 2xx the route never gives yet (images)
                if not any(media in content for media in JSON_MEDIA):
                    continue  # raw bytes or a stream
                schema = next((content[m].get("schema") for m in JSON_MEDIA if m in content), None)
                yield f"{method.upper()} {path}", schema


def test_every_json_answer_has_a_typed_schema(document: dict[str, Any]) -> None:
    untyped = sorted(name for name, schema in answers(document) if not typed(document, schema))
    assert untyped == []
