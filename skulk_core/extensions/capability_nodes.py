"""Capability-node summaries: bounded, credential-free descriptions of the managed
capability nodes (an installed plugin's own UI, say) a host runs.

They ride the telemetry plane to every node and are drawn by every dashboard, so
every bound is checked at construction (and again when a peer's reading is
decoded): at most four surfaces and eight actions, a descriptor action's fixed
payload at most 4 KiB, absolute http(s) URLs without embedded credentials.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal
from urllib.parse import urlsplit

import msgspec

from skulk_core.extensions.capabilities import json_size

MAX_SURFACES: Final = 4
MAX_ACTIONS: Final = 8
MAX_ACTION_PAYLOAD_BYTES: Final = 4 * 1024
MAX_NODES_PER_HOST: Final = 16
MAX_URL_LENGTH: Final = 2048
STALE_AFTER_SECONDS: Final = 90.0
"""A host whose last reading is older than this (three republish intervals) is left
out of ``capabilityNodes``."""

CapabilityNodeStatus = Literal[
    "installed", "starting", "ready", "degraded", "disabled", "configuration_invalid", "failed"
]

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
_Title = Annotated[str, msgspec.Meta(max_length=200)]


def check_url(url: str) -> None:
    """Refuse anything but an absolute http(s) URL without credentials in it."""
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"a surface URL is at most {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a valid URL: {exc}") from None
    del port
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("a surface URL must be an absolute http(s) URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("a surface URL must not carry credentials")


class CapabilityNodeSurface(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    surface_id: _Name
    title: _Title
    url: str
    kind: Literal["link"] = "link"
    ready: bool = True

    def __post_init__(self) -> None:
        check_url(self.url)


class CapabilityNodeAction(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A flyout entry: open a surface, follow a link, or run a descriptor action
    (``POST /v1/capabilities/call`` on the host with a fixed payload)."""

    action_id: _Name
    title: _Title
    kind: Literal["surface", "link", "descriptor"]
    surface_id: str | None = None
    url: str | None = None
    capability_id: str | None = None
    version: str | None = None
    payload: dict[str, object] | None = None

    def __post_init__(self) -> None:
        if self.kind == "surface" and not self.surface_id:
            raise ValueError("a surface action names its surface_id")
        if self.kind == "link" and self.url is None:
            raise ValueError("a link action carries a url")
        if self.url is not None:
            check_url(self.url)
        if self.kind == "descriptor" and not self.capability_id:
            raise ValueError("a descriptor action names its capability_id")
        if self.payload is not None and json_size(self.payload) > MAX_ACTION_PAYLOAD_BYTES:
            raise ValueError(f"an action payload is at most {MAX_ACTION_PAYLOAD_BYTES} bytes")


class CapabilityNodeSummary(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One capability node on a host, keyed by (``plugin_id``, ``node_id``)."""

    plugin_id: _Name
    node_id: _Name
    bundle_id: _Name
    version: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    title: _Title | None = None
    status: CapabilityNodeStatus = "installed"
    owner_available: bool = False
    surfaces: tuple[CapabilityNodeSurface, ...] = ()
    actions: tuple[CapabilityNodeAction, ...] = ()
    operations_active: Annotated[int, msgspec.Meta(ge=0)] = 0

    def __post_init__(self) -> None:
        if len(self.surfaces) > MAX_SURFACES:
            raise ValueError(f"a capability node has at most {MAX_SURFACES} surfaces")
        if len(self.actions) > MAX_ACTIONS:
            raise ValueError(f"a capability node has at most {MAX_ACTIONS} actions")
        surface_ids = {s.surface_id for s in self.surfaces}
        for action in self.actions:
            if action.kind == "surface" and action.surface_id not in surface_ids:
                raise ValueError(f"action {action.action_id!r} names an unknown surface")

    @property
    def key(self) -> tuple[str, str]:
        return (self.plugin_id, self.node_id)
