"""JSON Schema checks for capability payloads, results and frames.

Validators are built once per descriptor. References resolve only inside the schema
itself: the registry given to jsonschema retrieves nothing, so a remote ``$ref``
(``https://...``, ``file:...``) is never fetched; it makes the value fail instead.

jsonschema loads with the first schema checked, not at the node's start (issue 43),
and a first-party descriptor's schemas (``trusted``: written and tested here) are
checked and compiled on their first use; an extension's are checked as it registers.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    import referencing

MAX_REPORTED_ERRORS: Final = 3


class _Error(Protocol):
    message: str
    absolute_path: Iterable[object]


class _Validator(Protocol):
    def iter_errors(self, instance: object) -> Iterator[_Error]: ...


def _refuse(uri: str) -> referencing.Resource[object]:
    import referencing.exceptions  # noqa: PLC0415 (see the module's docstring)

    raise referencing.exceptions.NoSuchResource(uri)


@functools.cache
def _no_retrieval() -> referencing.Registry[object]:
    import referencing  # noqa: PLC0415 (see the module's docstring)

    return referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]


class SchemaInvalid(ValueError):
    """A descriptor's schema is not a valid JSON Schema."""


class Schema:
    """A compiled JSON Schema; :meth:`problems` lists why a value does not conform."""

    def __init__(self, schema: dict[str, object], *, trusted: bool = False) -> None:
        self._schema = schema
        self._compiled: _Validator | None = None
        if not trusted:
            self._validator()

    def _validator(self) -> _Validator:
        if self._compiled is None:
            import jsonschema  # type: ignore[import-untyped]  # noqa: PLC0415
            from jsonschema.exceptions import (  # type: ignore[import-untyped]  # noqa: PLC0415
                SchemaError,
            )

            cls = jsonschema.validators.validator_for(
                self._schema, default=jsonschema.Draft202012Validator
            )
            try:
                cls.check_schema(self._schema)
            except SchemaError as exc:
                raise SchemaInvalid(str(exc.message)) from None
            self._compiled = cls(self._schema, registry=_no_retrieval())
        return self._compiled

    def problems(self, value: object) -> list[str]:
        """Empty when ``value`` conforms; else up to three readable reasons."""
        import referencing.exceptions  # noqa: PLC0415 (see the module's docstring)

        found: list[str] = []
        try:
            for error in self._validator().iter_errors(value):
                where = "/".join(str(p) for p in error.absolute_path) or "(root)"
                found.append(f"{where}: {error.message}")
                if len(found) >= MAX_REPORTED_ERRORS:
                    break
        except referencing.exceptions.Unresolvable as exc:
            return [f"the schema refers to {exc.ref!r}, which is never fetched"]
        return found
