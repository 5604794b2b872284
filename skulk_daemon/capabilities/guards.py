"""The provider side of a call: the guards every call and stream opening passes, the
unary pipeline, and stream admission.

The same guards run whether the caller is this node (the in-process fast path), a
peer over the fabric, or ``POST /v1/capabilities/call``: the target is this node,
the payload is at most 1 MiB, the pinned ``id@version`` and revision are served and
ready, the node has a free slot (else ``overloaded``), the payload matches the input
schema, and all of it plus the handler runs inside the call's one deadline. The
result is checked too: a JSON object, at most 1 MiB, matching the output schema. A
stream opening runs the same guards, then the provider's optional ``admit_stream``
inside the same deadline, and readiness once more after it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Final

from skulk_core.extensions.capabilities import (
    MAX_PAYLOAD_BYTES,
    CapabilityCall,
    CapabilityError,
    CapabilityResult,
    json_size,
)
from skulk_daemon.capabilities.registry import (
    ProviderRegistry,
    Registration,
    Slots,
    is_streaming,
)

log = logging.getLogger(__name__)

MAX_ERROR_MESSAGE: Final = 500


def preflight(
    registry: ProviderRegistry, call: CapabilityCall, own_node: str, *, streaming: bool
) -> Registration | CapabilityError:
    """The checks before any work: identity, size, what is pinned, and the mode."""
    if call.target_node != own_node:
        return CapabilityError(
            code="not_found", message=f"this is node {own_node}, not {call.target_node}"
        )
    try:
        size = json_size(call.payload)
    except (TypeError, ValueError) as exc:
        return CapabilityError(code="invalid_payload", message=f"payload is not JSON: {exc}")
    if size > MAX_PAYLOAD_BYTES:
        return CapabilityError(
            code="payload_too_large",
            message=f"the payload is {size} bytes; at most {MAX_PAYLOAD_BYTES} are accepted",
        )
    found = registry.resolve(call)
    if isinstance(found, CapabilityError):
        return found
    if is_streaming(found) != streaming:
        mode = found.descriptor.io_mode
        verb = "opened as a stream" if is_streaming(found) else "called, not streamed"
        return CapabilityError(
            code="not_found", message=f"{call.qualified_id} is {mode}: it is {verb}"
        )
    return found


def check_payload(registration: Registration, call: CapabilityCall) -> CapabilityError | None:
    problems = registration.input.problems(call.payload)
    if problems:
        return CapabilityError(code="invalid_payload", message="; ".join(problems))
    return None


def check_result(registration: Registration, result: object) -> CapabilityError | None:
    if not isinstance(result, dict) or not all(isinstance(k, str) for k in result):
        return CapabilityError(
            code="invalid_result",
            message=f"the handler returned {type(result).__name__}, not a JSON object",
        )
    try:
        size = json_size(result)
    except (TypeError, ValueError) as exc:
        return CapabilityError(code="invalid_result", message=f"the result is not JSON: {exc}")
    if size > MAX_PAYLOAD_BYTES:
        return CapabilityError(
            code="payload_too_large",
            message=f"the result is {size} bytes; at most {MAX_PAYLOAD_BYTES} are allowed",
        )
    problems = registration.output.problems(result)
    if problems:
        return CapabilityError(code="invalid_result", message="; ".join(problems))
    return None


def describe_exception(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_ERROR_MESSAGE else text[: MAX_ERROR_MESSAGE - 1] + "…"


async def run_unary(
    registry: ProviderRegistry,
    slots: Slots,
    call: CapabilityCall,
    *,
    own_node: str,
    deadline: float,
) -> CapabilityResult:
    """Serve one unary call on this node; every outcome is a typed result."""
    found = preflight(registry, call, own_node, streaming=False)
    if isinstance(found, CapabilityError):
        return CapabilityResult(call_id=call.call_id, ok=False, error=found)
    if not slots.try_acquire():
        return CapabilityResult.failure(
            call.call_id, "overloaded", f"this node already serves {slots.limit} calls"
        )
    try:
        scope = asyncio.timeout_at(deadline)
        try:
            async with scope:
                invalid = check_payload(found, call)
                if invalid is not None:
                    return CapabilityResult(call_id=call.call_id, ok=False, error=invalid)
                pending = found.handler()(found.context, call)
                if not inspect.isawaitable(pending):
                    return CapabilityResult.failure(
                        call.call_id, "provider_error", "handle_call must be a coroutine function"
                    )
                result: object = await pending
        except TimeoutError as exc:
            if scope.expired():
                return CapabilityResult.failure(
                    call.call_id,
                    "timeout",
                    f"{call.qualified_id} did not answer within {call.timeout_seconds:g} s",
                )
            return _provider_error(call, exc)
        except Exception as exc:
            return _provider_error(call, exc)
    finally:
        slots.release()
    bad = check_result(found, result)
    if bad is not None:
        return CapabilityResult(call_id=call.call_id, ok=False, error=bad)
    assert isinstance(result, dict)
    return CapabilityResult.success(call.call_id, result)


def _provider_error(call: CapabilityCall, exc: BaseException) -> CapabilityResult:
    log.warning("capability %s raised", call.qualified_id, exc_info=exc)
    return CapabilityResult.failure(call.call_id, "provider_error", describe_exception(exc))


async def admit_stream(
    registry: ProviderRegistry, found: Registration, call: CapabilityCall, deadline: float
) -> CapabilityError | None:
    """The schema check and the provider's dynamic admission, inside the deadline;
    readiness is checked again after it. ``None`` admits the stream."""
    scope = asyncio.timeout_at(deadline)
    try:
        async with scope:
            invalid = check_payload(found, call)
            if invalid is not None:
                return invalid
            hook = found.admission_hook()
            if hook is not None:
                outcome = hook(found.context, call)
                if inspect.isawaitable(outcome):
                    outcome = await outcome
                if isinstance(outcome, CapabilityError):
                    return outcome
                if outcome is not None:
                    return CapabilityError(
                        code="provider_error",
                        message="admit_stream must return None or a CapabilityError",
                    )
    except TimeoutError as exc:
        if scope.expired():
            return CapabilityError(code="timeout", message="admission ran past the deadline")
        return CapabilityError(code="provider_error", message=describe_exception(exc))
    except Exception as exc:
        log.warning("admit_stream of %s raised", call.qualified_id, exc_info=True)
        return CapabilityError(code="provider_error", message=describe_exception(exc))
    if registry.closed or not found.ready():
        return CapabilityError(
            code="not_found", message=f"{call.qualified_id} is not available right now"
        )
    return None
