"""Every plugin route documents its success body: a generated client of
``/v1/plugins*``, ``/v1/auth/plugin-grants`` and the plugin-node routes gets a typed
answer, never an empty object (read off ``/api/openapi.json``, in-process)."""

from __future__ import annotations

from typing import Any, Final

from tests.api import test_openapi_doc
from tests.api.test_openapi_doc import operations

PREFIXES: Final = ("/v1/plugins", "/v1/auth/plugin-grants")
PREFIX: Final = "#/components/schemas/"


document = test_openapi_doc.document
"""The document, read once per module (the same fixture as ``test_openapi_doc``'s)."""


def resolved(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].removeprefix(PREFIX)]
    return schema


def typed(document: dict[str, Any], schema: dict[str, Any]) -> bool:
    """An object with named properties (each alternative, for a union)."""
    schema = resolved(document, schema)
    alternatives = schema.get("oneOf") or schema.get("anyOf")
    if alternatives:
        return all(
            typed(document, s) for s in alternatives if resolved(document, s) != {"type": "null"}
        )
    return schema.get("type") == "object" and bool(schema.get("properties"))


def test_the_plugin_routes_are_all_found(document: dict[str, Any]) -> None:
    found = [
        f"{method} {path}"
        for method, path, _ in operations(document)
        if path.startswith(PREFIXES) and method != "HEAD"
    ]
    # The inventory and 18 managed-plugin operations, 15 node operations, the host
    # network report, and the two grant operations.
    assert len(found) == 36, found


def test_every_plugin_success_body_is_a_typed_object(document: dict[str, Any]) -> None:
    untyped = []
    for method, path, operation in operations(document):
        if not path.startswith(PREFIXES) or method == "HEAD":
            continue
        success = {s: r for s, r in operation["responses"].items() if s.startswith("2")}
        assert success, (method, path)
        for status, response in success.items():
            schema = (response.get("content") or {}).get("application/json", {}).get("schema")
            if schema is None or not typed(document, schema):
                untyped.append((method, path, status, schema))
    assert untyped == []


def test_an_answer_documents_its_fields_by_their_wire_names(document: dict[str, Any]) -> None:
    inventory = document["paths"]["/v1/plugins"]["get"]["responses"]["200"]
    schema = resolved(document, inventory["content"]["application/json"]["schema"])
    entry = resolved(document, schema["properties"]["plugins"]["items"])
    assert set(entry["properties"]) == {"pluginId", "available", "nodes"}
    managed = document["paths"]["/v1/plugins/managed"]["get"]["responses"]["200"]
    listing = resolved(document, managed["content"]["application/json"]["schema"])
    installation = resolved(document, listing["properties"]["installations"]["items"])
    assert {"plugin_id", "selection", "service", "operations"} <= set(installation["properties"])
