"""Every refusal of plugin trust, release, catalog and staging, typed.

A refusal carries the spec's stable ``code`` (what a manager answers and a route maps
to a status), a typed ``reason`` (what a test and a renderer switch on) and one
sentence ``message`` that names the problem and what to do next. No message ever
carries a credential, a URL's secret part or a host-local path.

The spec names three codes: ``manager_operation_refused`` (every refusal but two),
``release_protocol_unsupported`` (a verified release outside this host's protocol
window) and ``manager_build_differs`` (a host on another build than the staged manager's:
``skulk_daemon/plugins/access.py`` refuses it).
"""

from __future__ import annotations

from typing import Final, Literal

OPERATION_REFUSED: Final = "manager_operation_refused"
PROTOCOL_UNSUPPORTED: Final = "release_protocol_unsupported"
BUILD_DIFFERS: Final = "manager_build_differs"

RefusalCode = Literal[
    "manager_operation_refused", "release_protocol_unsupported", "manager_build_differs"
]

Reason = Literal[
    # documents
    "malformed",
    "too_large",
    "wrong_type",
    # signatures and trust
    "publisher_untrusted",
    "publisher_revoked",
    "artifact_revoked",
    "signature_mismatch",
    "trust_expired",
    "trust_not_newer",
    "document_expired",
    "not_yet_valid",
    # ordering
    "rollback",
    "equivocation",
    # compatibility
    "protocol_unsupported",
    "platform_mismatch",
    "python_mismatch",
    "build_mismatch",
    "bundle_mismatch",
    # transfer and staging
    "source_invalid",
    "unreachable",
    "http_status",
    "redirected",
    "encoded_response",
    "size_mismatch",
    "digest_mismatch",
    "unsafe_archive",
    "installer_failed",
    "seal_mismatch",
    "recovery_required",
    # the manager itself
    "not_found",
    "busy",
    "timeout",
]

ProtocolKind = Literal["release", "runtime"]


class PluginRefusal(Exception):
    """One refusal: ``code`` for the wire, ``reason`` for code, ``message`` for people."""

    code: RefusalCode = OPERATION_REFUSED

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason!r}, {self.message!r})"


class ReleaseProtocolUnsupported(PluginRefusal):
    """A verified release (or its runtime envelope) outside this host's protocol window.

    The manager answers with exactly ``kind``, ``offered`` and ``accepted`` (integers);
    the routes answer 409 with :attr:`message`, the sentence the guided installer prints.
    """

    code: RefusalCode = PROTOCOL_UNSUPPORTED

    def __init__(self, kind: ProtocolKind, offered: int, accepted: tuple[int, ...]) -> None:
        self.kind: ProtocolKind = kind
        self.offered = offered
        self.accepted = accepted
        super().__init__("protocol_unsupported", protocol_sentence(kind, offered, accepted))

    def wire(self) -> dict[str, object]:
        """The manager's error body: the code and the three facts, nothing else."""
        return {
            "code": self.code,
            "kind": self.kind,
            "offered": self.offered,
            "accepted": list(self.accepted),
        }


def protocol_sentence(kind: ProtocolKind, offered: int, accepted: tuple[int, ...]) -> str:
    """The one sentence every surface uses for a protocol outside the window."""
    noun = "release" if kind == "release" else "runtime"
    if len(accepted) == 1:
        accepts = f"{noun} protocol {accepted[0]}"
    else:
        accepts = f"{noun} protocols " + " and ".join(str(n) for n in accepted)
    return (
        f"This host accepts {accepts}, but this {noun} offers protocol {offered}: "
        "update Skulk on this host, or choose a release published for it."
    )


def refuse(reason: Reason, message: str) -> PluginRefusal:
    """A :class:`PluginRefusal` with the general code (``raise refuse(...)``)."""
    return PluginRefusal(reason, message)
