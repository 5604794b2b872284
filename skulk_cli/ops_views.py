"""Views of the answers the CLI's operational jobs read whose wire types live in the
daemon (the CLI never imports it): just the fields shown, each with a default, so a
newer node with more to say still renders."""

from __future__ import annotations

import msgspec


class FieldSampleView(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str = ""
    hardware_class: str = ""
    engine: str = ""
    time_to_first_token_ms: float | None = None
    decode_tokens_per_second: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failure_class: str | None = None


class TelemetryPreviewView(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/telemetry/preview`` (snake_case on the wire)."""

    enabled: bool = False
    consent: str = "unasked"
    pending: tuple[FieldSampleView, ...] = ()
    dropped_since_start: int = 0
    ingest_url: str = ""


class PluginGrantView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    device_id: str
    device_name: str = ""
    revision: int = 0
    scopes: tuple[str, ...] = ()
    active: bool = False


class PluginGrantsView(msgspec.Struct, frozen=True, kw_only=True):
    devices: tuple[PluginGrantView, ...] = ()
