"""What ``/api/openapi.json`` promises, read off the document itself (in-process).

The contract test (``test_openapi_contract.py``) holds the live API to the document;
these hold the document to what a generated client needs: every body it must send is
described, every success body has a schema, and every error is in the envelope that
route really answers with, never Litestar's ``{"detail", "status_code"}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import pytest

from tests.api.in_process import AppNode

BODYLESS: Final = frozenset(
    {
        "POST /onboarding",
        "POST /v1/cancel/{command_id}",
        "POST /admin/restart",
        "POST /v1/plugins/managed/installations/{plugin_id}/operations/{operation_id}/recover",
        "POST /v1/plugins/{plugin_id}/nodes/{node_id}/setup-operations/{operation_id}/resume",
        "POST /v1/plugins/{plugin_id}/nodes/{node_id}/proposal-operations/{operation_id}/resume",
        "POST /store/reconciliation/rescan",
        "POST /v1/videos/{video_id}/cancel",
        "POST /v1/music/{music_id}/cancel",
    }
)
"""Operations with a method that may carry a body, which take none."""

SERVING: Final = ("/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/embeddings")
"""The routes that decode their own bodies (plus every ``/ollama/api/...`` one)."""

METHODS: Final = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


@pytest.fixture(scope="module")
def document(bare_app: AppNode) -> dict[str, Any]:
    response = bare_app.get("/api/openapi.json")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method in METHODS:
            if method in item:
                yield method.upper(), path, item[method]


def envelope_for(path: str) -> str:
    if path == "/v1/messages":
        return "ClaudeError"
    if path.startswith("/ollama"):
        return "OllamaError"
    return "OpenAIError"


def test_every_body_an_operation_takes_is_documented(document: dict[str, Any]) -> None:
    missing = [
        f"{method} {path}"
        for method, path, operation in operations(document)
        if method in {"POST", "PUT", "PATCH"}
        and f"{method} {path}" not in BODYLESS
        and not operation.get("requestBody", {}).get("content")
    ]
    assert missing == []


def test_the_serving_routes_document_their_request_and_success_bodies(
    document: dict[str, Any],
) -> None:
    serving = [
        (method, path, operation)
        for method, path, operation in operations(document)
        if method == "POST" and (path in SERVING or path.startswith("/ollama/api/"))
    ]
    assert len(serving) == len(SERVING) + 9  # chat, generate and show, under three prefixes
    for method, path, operation in serving:
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body.get("$ref", "").startswith("#/components/schemas/"), (method, path)
        content = operation["responses"]["200"]["content"]
        assert content, (method, path)
        for media, entry in content.items():
            assert entry.get("schema") not in (None, {}), (method, path, media)


def test_no_documented_schema_is_empty(document: dict[str, Any]) -> None:
    empty = [
        (method, path, status, media)
        for method, path, operation in operations(document)
        for status, response in operation["responses"].items()
        for media, entry in (response.get("content") or {}).items()
        if entry.get("schema") in (None, {})
    ]
    assert empty == []


def test_every_error_is_documented_in_its_routes_envelope(document: dict[str, Any]) -> None:
    wrong = []
    for method, path, operation in operations(document):
        expected = f"#/components/schemas/{envelope_for(path)}"
        for status, response in operation["responses"].items():
            if int(status) < 400:
                continue
            schemas = [entry.get("schema") for entry in (response.get("content") or {}).values()]
            if schemas != [{"$ref": expected}]:
                wrong.append((method, path, status, schemas))
    assert wrong == []
    schemas = document["components"]["schemas"]
    assert set(schemas["OpenAIError"]["properties"]) == {"error"}
    assert set(schemas["OpenAIErrorDetail"]["properties"]) == {"message", "type", "code"}
    assert set(schemas["ClaudeError"]["properties"]) == {"type", "error"}
    assert set(schemas["OllamaError"]["properties"]) == {"error"}


def test_no_response_uses_litestars_detail_shape(document: dict[str, Any]) -> None:
    def shapes(value: Any) -> Iterator[Any]:
        if isinstance(value, dict):
            yield value
            for item in value.values():
                yield from shapes(item)
        elif isinstance(value, list):
            for item in value:
                yield from shapes(item)

    detail = [
        schema
        for schema in shapes(document)
        if isinstance(schema.get("properties"), dict)
        # Litestar's error body; a finding's or a flight entry's own ``detail`` is not it.
        and {"detail", "status_code"} <= set(schema["properties"])
    ]
    assert detail == []


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    def refs(value: Any) -> Iterator[str]:
        if isinstance(value, dict):
            if isinstance(value.get("$ref"), str):
                yield value["$ref"]
            for item in value.values():
                yield from refs(item)
        elif isinstance(value, list):
            for item in value:
                yield from refs(item)

    names = set(document["components"]["schemas"])
    prefix = "#/components/schemas/"
    dangling = {ref for ref in refs(document) if ref.removeprefix(prefix) not in names}
    assert dangling == set()
