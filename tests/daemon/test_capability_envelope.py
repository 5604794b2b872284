"""A capability call as the caller builds it: refused before it is sent when its
deadline is out of range or its payload is not JSON or too large."""

from __future__ import annotations

from skulk_core.extensions.capabilities import (
    MAX_PAYLOAD_BYTES,
    MAX_TIMEOUT_SECONDS,
    CapabilityCall,
    CapabilityResult,
)
from skulk_core.ids import NodeId
from skulk_daemon.capabilities.calls import envelope

ME = NodeId("me")


def test_a_call_in_bounds_is_built_for_its_target() -> None:
    call = envelope(ME, "peer", "echo", "1.0.0", "rev", {"text": "hi"}, 5.0)
    assert isinstance(call, CapabilityCall)
    assert (call.caller_node, call.target_node, call.capability_id) == ("me", "peer", "echo")
    assert (call.version, call.descriptor_revision, call.timeout_seconds) == ("1.0.0", "rev", 5.0)
    assert len(call.call_id) == 32


def test_a_deadline_out_of_range_is_refused() -> None:
    for timeout in (0.0, -1.0, MAX_TIMEOUT_SECONDS + 1):
        refused = envelope(ME, "peer", "echo", "1.0.0", "rev", {}, timeout)
        assert isinstance(refused, CapabilityResult)
        assert refused.error is not None and refused.error.code == "invalid_payload"
    assert isinstance(envelope(ME, "p", "e", "1", "r", {}, MAX_TIMEOUT_SECONDS), CapabilityCall)


def test_a_payload_past_the_bound_is_refused_as_too_large() -> None:
    big = {"text": "x" * MAX_PAYLOAD_BYTES}
    refused = envelope(ME, "peer", "echo", "1.0.0", "rev", big, 5.0)
    assert isinstance(refused, CapabilityResult)
    assert refused.error is not None and refused.error.code == "payload_too_large"


def test_a_payload_that_is_not_json_is_refused() -> None:
    refused = envelope(ME, "peer", "echo", "1.0.0", "rev", {"x": object()}, 5.0)
    assert isinstance(refused, CapabilityResult)
    assert refused.error is not None and refused.error.code == "invalid_payload"
