"""A capability call as the caller builds it (before anything crosses the fabric)."""

from __future__ import annotations

import secrets

from skulk_core.extensions.capabilities import (
    MAX_PAYLOAD_BYTES,
    MAX_TIMEOUT_SECONDS,
    CapabilityCall,
    CapabilityResult,
    JsonObject,
    json_size,
)
from skulk_core.ids import NodeId


def envelope(  # noqa: PLR0917 (the spec's positional call shape)
    caller: NodeId,
    node_id: str,
    capability_id: str,
    version: str,
    revision: str,
    payload: JsonObject,
    timeout: float,
) -> CapabilityCall | CapabilityResult:
    """The call to send, with a fresh id; or, for a deadline out of range or a payload
    that is not JSON or too large, the failure that answers it before anything is sent."""
    call_id = secrets.token_hex(16)
    if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
        return CapabilityResult.failure(
            call_id, "invalid_payload", f"timeout must be in (0, {MAX_TIMEOUT_SECONDS:g}] s"
        )
    # NOTE: checked here too, before anything crosses the fabric: the provider would
    # refuse it anyway, and a huge payload must not occupy (or break) the link.
    try:
        size = json_size(payload)
    except (TypeError, ValueError) as exc:
        return CapabilityResult.failure(call_id, "invalid_payload", f"not JSON: {exc}")
    if size > MAX_PAYLOAD_BYTES:
        return CapabilityResult.failure(
            call_id,
            "payload_too_large",
            f"the payload is {size} bytes; at most {MAX_PAYLOAD_BYTES} are accepted",
        )
    return CapabilityCall(
        call_id=call_id,
        capability_id=capability_id,
        version=version,
        descriptor_revision=revision,
        caller_node=caller,
        target_node=node_id,
        timeout_seconds=timeout,
        payload=payload,
    )
