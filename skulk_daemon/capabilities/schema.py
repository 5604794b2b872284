"""JSON Schema checks for capability payloads, results and frames.

Validators are built once per descriptor. References resolve only inside the schema
itself: the registry given to jsonschema retrieves nothing, so a remote ``$ref``
(``https://...``, ``file:...``) is never fetched; it makes the value fail instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final, Protocol

import jsonschema  # type: ignore[import-untyped]
import referencing
import referencing.exceptions
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

MAX_REPORTED_ERRORS: Final = 3


class _Error(Protocol):
    message: str
    absolute_path: Iterable[object]


class _Validator(Protocol):
    def iter_errors(self, instance: object) -> Iterator[_Error]: ...


def _refuse(uri: str) -> referencing.Resource[object]:
    raise referencing.exceptions.NoSuchResource(uri)


_NO_RETRIEVAL: Final[referencing.Registry[object]] = referencing.Registry(
    retrieve=_refuse  # type: ignore[call-arg]
)


class SchemaInvalid(ValueError):
    """A descriptor's schema is not a valid JSON Schema."""


class Schema:
    """A compiled JSON Schema; :meth:`problems` lists why a value does not conform."""

    def __init__(self, schema: dict[str, object]) -> None:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(schema)
        except SchemaError as exc:
            raise SchemaInvalid(str(exc.message)) from None
        self._validator: _Validator = cls(schema, registry=_NO_RETRIEVAL)

    def problems(self, value: object) -> list[str]:
        """Empty when ``value`` conforms; else up to three readable reasons."""
        found: list[str] = []
        try:
            for error in self._validator.iter_errors(value):
                where = "/".join(str(p) for p in error.absolute_path) or "(root)"
                found.append(f"{where}: {error.message}")
                if len(found) >= MAX_REPORTED_ERRORS:
                    break
        except referencing.exceptions.Unresolvable as exc:
            return [f"the schema refers to {exc.ref!r}, which is never fetched"]
        return found
