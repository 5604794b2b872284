"""What a caller is told when a managed owner does not admit a stream."""

from __future__ import annotations

from skulk_core.extensions.capabilities import CapabilityError
from skulk_daemon.plugins.owners.relay import admission_error
from skulk_host.plugin_owners import wire


def test_the_owners_typed_error_is_passed_on() -> None:
    typed = {"code": "overloaded", "message": "three streams at once at most"}
    refused = wire.StreamRefused("busy", "full", typed)
    assert admission_error(refused) == CapabilityError(
        code="overloaded", message="three streams at once at most"
    )


def test_an_invalid_typed_error_falls_back_to_the_owners_code() -> None:
    refused = wire.StreamRefused("busy", "full", {"code": 7})
    assert admission_error(refused) == CapabilityError(
        code="overloaded", message="the managed owner refused: full"
    )


def test_an_owner_refusal_maps_its_code() -> None:
    assert admission_error(wire.OwnerError("too_large", "64 KiB at most")) == CapabilityError(
        code="payload_too_large", message="64 KiB at most"
    )
    assert admission_error(wire.OwnerError("nonsense", "?")).code == "provider_error"


def test_a_lost_owner_is_a_timeout_only_when_it_timed_out() -> None:
    lost = wire.OwnerUnavailable("no answer", timed_out=True)
    assert admission_error(lost) == CapabilityError(
        code="timeout", message="the managed owner: no answer"
    )
    assert admission_error(wire.OwnerUnavailable("gone")).code == "provider_error"
