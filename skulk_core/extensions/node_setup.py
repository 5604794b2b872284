"""The read-only setup facets of an installed node: preflight checks and public setup
files (the spec's ``skulk.extensions.setup``).

- :class:`NodePreflightProvider`: ``async node_preflight(node_id)`` runs the node's
  bounded, nonbillable setup checks and returns :class:`NodePreflight` (one to 32
  distinct :class:`PreflightCheck` records). It enables nothing and approves nothing;
  results describe the observed configuration, not a reusable admission token.
- :class:`NodeSetupProvider`: ``async node_setup(node_id)`` returns :class:`NodeSetup`,
  one to eight public :class:`SetupArtifact` text files (unique safe names, at most
  16,384 characters each) for a node whose inventory entry sets ``setup_available``.
  Only public data: never credentials, executables or private host paths; the read
  generates nothing and changes nothing.

Python fields are snake_case; the HTTP representation is camelCase.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, Protocol, runtime_checkable

import msgspec

MAX_CHECKS: Final = 32
MAX_ARTIFACTS: Final = 8
MAX_ARTIFACT_CHARS: Final = 16_384
MAX_SETUP_RESPONSE_BYTES: Final = 64 * 1024
"""Preflight and setup-file responses are each bounded to 64 KiB."""

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
_Digest = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
_Revision = Annotated[int, msgspec.Meta(ge=0)]


class PreflightCheck(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    code: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
    passed: bool
    corrective_action: Annotated[str, msgspec.Meta(max_length=1024)] | None = None


class NodePreflight(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node_id: _Id
    revision: _Revision
    schema_digest: _Digest
    values_digest: _Digest
    observed_at: Annotated[int, msgspec.Meta(ge=0)]
    checks: Annotated[tuple[PreflightCheck, ...], msgspec.Meta(min_length=1, max_length=MAX_CHECKS)]
    credential_revision: _Revision | None = None

    def __post_init__(self) -> None:
        if len({c.code for c in self.checks}) != len(self.checks):
            raise ValueError("preflight check codes must be distinct")


class SetupArtifact(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    name: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    title: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    media_type: Literal["application/json", "text/plain"]
    content: Annotated[str, msgspec.Meta(max_length=MAX_ARTIFACT_CHARS)]


class NodeSetup(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node_id: _Id
    revision: _Revision
    schema_digest: _Digest
    credential_revision: _Revision
    artifacts: Annotated[
        tuple[SetupArtifact, ...], msgspec.Meta(min_length=1, max_length=MAX_ARTIFACTS)
    ]

    def __post_init__(self) -> None:
        if len({a.name for a in self.artifacts}) != len(self.artifacts):
            raise ValueError("setup artifact names must be unique")


@runtime_checkable
class NodePreflightProvider(Protocol):
    async def node_preflight(self, node_id: str) -> NodePreflight: ...


@runtime_checkable
class NodeSetupProvider(Protocol):
    async def node_setup(self, node_id: str) -> NodeSetup: ...
