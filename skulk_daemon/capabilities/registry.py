"""The providers this node serves, and who may be admitted to them.

A provider is any object with ``capabilities()`` (an extension, or a first-party
provider such as VAD); its handlers are looked up by name: ``handle_call`` (unary),
``handle_stream`` (server streaming), ``handle_input_stream`` (client streaming and
bidirectional), optionally ``admit_stream`` and ``capability_ready``. Each accepted
descriptor is compiled once (its schemas checked and turned into validators) and
keyed by ``id@version``.

Resolution answers the first three typed errors of the pipeline: ``not_found`` (no
such id, a provider not ready, a node shutting down), ``version_mismatch`` (the id
exists at other versions) and ``revision_mismatch`` (the caller pinned a different
contract). Readiness is rechecked on every resolution, so a cached descriptor never
bypasses it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from skulk_core.extensions.capabilities import (
    STREAMING_MODES,
    CapabilityCall,
    CapabilityDescriptor,
    CapabilityError,
    descriptor_revision,
)
from skulk_daemon.capabilities.schema import Schema, SchemaInvalid

log = logging.getLogger(__name__)

MAX_INFLIGHT_CALLS: Final = 32
"""Unary calls a node serves at once; one more is refused as ``overloaded``."""
MAX_ACTIVE_STREAMS: Final = 32
"""Streams a node serves at once; one more opening is refused as ``overloaded``."""

_HANDLER_OF: Final = {
    "unary": "handle_call",
    "server_streaming": "handle_stream",
    "client_streaming": "handle_input_stream",
    "bidirectional": "handle_input_stream",
}


class Slots:
    """A non-blocking concurrency bound: excess work is refused, never queued."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def try_acquire(self) -> bool:
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    def release(self) -> None:
        self.used = max(0, self.used - 1)


@dataclass(frozen=True, slots=True)
class Registration:
    descriptor: CapabilityDescriptor
    revision: str
    provider: object
    context: object
    builtin: bool
    source: str
    input: Schema
    output: Schema
    input_chunk: Schema | None
    output_chunk: Schema | None

    @property
    def qualified_id(self) -> str:
        return self.descriptor.qualified_id

    def handler(self) -> Callable[..., object]:
        found: Callable[..., object] = getattr(self.provider, _HANDLER_OF[self.descriptor.io_mode])
        return found

    def admission_hook(self) -> Callable[..., object] | None:
        hook = getattr(self.provider, "admit_stream", None)
        return hook if callable(hook) else None

    def ready(self) -> bool:
        """The provider's cached health; ``True`` without the readiness facet."""
        check = getattr(self.provider, "capability_ready", None)
        if not callable(check):
            return True
        try:
            return check(self.qualified_id) is True
        except Exception:
            log.warning("readiness check of %s raised", self.qualified_id, exc_info=True)
            return False


def compile_descriptor(
    descriptor: CapabilityDescriptor, provider: object, context: object, *, builtin: bool
) -> Registration:
    """Check one descriptor against its provider; raises ``ValueError`` saying why not."""
    if not isinstance(descriptor, CapabilityDescriptor):
        raise ValueError(f"not a CapabilityDescriptor: {type(descriptor).__name__}")
    if not descriptor.id or not descriptor.version or "@" in descriptor.id:
        raise ValueError("a descriptor needs a non-empty id (without '@') and version")
    mode = descriptor.io_mode
    if not callable(getattr(provider, _HANDLER_OF[mode], None)):
        raise ValueError(f"{mode} capability without a {_HANDLER_OF[mode]} method")
    if mode in ("server_streaming", "bidirectional") and descriptor.output_chunk_schema is None:
        raise ValueError(f"a {mode} capability declares output_chunk_schema")
    if mode in ("client_streaming", "bidirectional") and descriptor.input_chunk_schema is None:
        raise ValueError(f"a {mode} capability declares input_chunk_schema")
    try:
        return Registration(
            descriptor=descriptor,
            revision=descriptor_revision(descriptor),
            provider=provider,
            context=context,
            builtin=builtin,
            source=type(provider).__name__,
            input=Schema(descriptor.input_schema, trusted=builtin),
            output=Schema(descriptor.output_schema, trusted=builtin),
            input_chunk=_optional(descriptor.input_chunk_schema, builtin),
            output_chunk=_optional(descriptor.output_chunk_schema, builtin),
        )
    except SchemaInvalid as exc:
        raise ValueError(f"invalid JSON Schema: {exc}") from None
    except (TypeError, ValueError) as exc:  # schemas that are not JSON at all
        raise ValueError(f"schemas must be JSON: {exc}") from None


def _optional(schema: dict[str, object] | None, trusted: bool) -> Schema | None:
    return None if schema is None else Schema(schema, trusted=trusted)


DynamicSource = Callable[[], Sequence[Registration]]
"""A cached snapshot of dynamically claimed registrations (managed owners): no I/O."""


class ProviderRegistry:
    def __init__(self) -> None:
        self._by_qualified: dict[str, Registration] = {}
        self._dynamic: list[DynamicSource] = []
        self.closed = False

    def add_dynamic(self, source: DynamicSource) -> None:
        """Consult ``source`` on every discovery and resolution. Static capability IDs
        keep priority; a contract claimed by two dynamic registrations (ready or not)
        is hidden from both."""
        self._dynamic.append(source)

    def static_ids(self) -> frozenset[str]:
        return frozenset(r.descriptor.id for r in self._by_qualified.values())

    def _claims(self) -> dict[str, Registration]:
        if not self._dynamic:
            return self._by_qualified
        merged = dict(self._by_qualified)
        static = self.static_ids()
        claimed: dict[str, list[Registration]] = {}
        for source in self._dynamic:
            try:
                registrations = list(source())
            except Exception:
                log.exception("a dynamic capability source raised; it claims nothing")
                continue
            for registration in registrations:
                if registration.descriptor.id not in static:
                    claimed.setdefault(registration.qualified_id, []).append(registration)
        for key, claims in claimed.items():
            if len(claims) == 1:
                merged[key] = claims[0]
        return merged

    def register(
        self, provider: object, context: object, *, builtin: bool = False
    ) -> list[CapabilityDescriptor]:
        """Register what ``provider.capabilities()`` returns; the descriptors accepted.

        A raising ``capabilities()`` or a bad descriptor is logged and skipped. A
        first-party (``builtin``) provider takes precedence over an extension that
        claims the same ``id@version``, whichever registered first; otherwise the
        first one wins.
        """
        listing = getattr(provider, "capabilities", None)
        if not callable(listing):
            return []
        name = type(provider).__name__
        try:
            descriptors = list(listing())
        except Exception:
            log.exception("capabilities() of %s raised; it serves nothing", name)
            return []
        accepted: list[CapabilityDescriptor] = []
        for descriptor in descriptors:
            try:
                registration = compile_descriptor(descriptor, provider, context, builtin=builtin)
            except ValueError as exc:
                log.error("capability from %s refused: %s", name, exc)
                continue
            key = registration.qualified_id
            current = self._by_qualified.get(key)
            if current is not None and (current.builtin or not builtin):
                log.error(
                    "capability %s from %s refused: %s already serves it",
                    key,
                    name,
                    current.source,
                )
                continue
            if current is not None:
                log.warning("first-party %s replaces %s's", key, current.source)
            self._by_qualified[key] = registration
            accepted.append(descriptor)
            log.info("capability %s (%s) served by %s", key, descriptor.io_mode, name)
        return accepted

    def ready(self) -> list[Registration]:
        """What discovery shows: every ready capability, ordered by ``id@version``."""
        if self.closed:
            return []
        return [r for _, r in sorted(self._claims().items()) if r.ready()]

    def resolve(self, call: CapabilityCall) -> Registration | CapabilityError:
        """The registration ``call`` is pinned to, or the typed reason it is not served."""
        if self.closed:
            return CapabilityError(code="not_found", message="this node is shutting down")
        claims = self._claims()
        registration = claims.get(call.qualified_id)
        if registration is None:
            versions = sorted(
                r.descriptor.version
                for r in claims.values()
                if r.descriptor.id == call.capability_id and r.ready()
            )
            if versions:
                return CapabilityError(
                    code="version_mismatch",
                    message=f"{call.capability_id} is served at {', '.join(versions)}, "
                    f"not {call.version}",
                )
            return CapabilityError(
                code="not_found", message=f"no capability {call.qualified_id} on this node"
            )
        if not registration.ready():
            return CapabilityError(
                code="not_found", message=f"{call.qualified_id} is not available right now"
            )
        if call.descriptor_revision != registration.revision:
            return CapabilityError(
                code="revision_mismatch",
                message=f"{call.qualified_id} is at revision {registration.revision}; "
                "describe it again and retry",
            )
        return registration


def is_streaming(registration: Registration) -> bool:
    return registration.descriptor.io_mode in STREAMING_MODES
