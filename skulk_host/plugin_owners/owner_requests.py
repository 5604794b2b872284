"""The requests an owner answers on its control socket, typed: one tagged union on
``op`` (:mod:`skulk_host.plugin_owners.wire` documents the protocol), decoded once.

The envelope's field names are the wire's (``node_id``, ``operator_id``, ...); the
facet values inside it keep their own (camelCase) names. Unknown fields are ignored,
as the owner always has: Skulk adds ``plugin_id`` to some requests for its own logs.

A request that does not decode is answered with the refusal the owner has always given
for it (:func:`decode` returns those bytes): not JSON, not an object, over the bound of
its ``op``, an unknown ``op``, or a field that does not fit.

These live beside the owner runtime, not in ``skulk_host``, because some carry the
extension facet types of ``skulk_daemon.extensions`` (proposals, setup actions).
"""

from __future__ import annotations

from typing import Annotated, Final, get_args

import msgspec

from skulk_core.extensions.capabilities import CapabilityCall
from skulk_core.extensions.proposals import ProposalApproval, ProposalReference
from skulk_core.extensions.setup_actions import SetupStart
from skulk_core.plugins.node_configuration import NodeConfigurationMutation, NodeCredentialMutation
from skulk_host.plugin_owners import wire

MAX_TRANSPORT_NODE_ID: Final = 256


class _Request(msgspec.Struct, frozen=True, kw_only=True, tag_field="op"):
    pass


class _NodeRequest(_Request, frozen=True, kw_only=True):
    node_id: str


class Health(_Request, frozen=True, kw_only=True, tag="health"):
    pass


class Describe(_Request, frozen=True, kw_only=True, tag="describe"):
    pass


class Bind(_Request, frozen=True, kw_only=True, tag="bind"):
    """Skulk binds its transport node id; the first binding holds."""

    transport_node_id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TRANSPORT_NODE_ID)]


class ReadConfiguration(_NodeRequest, frozen=True, kw_only=True, tag="configuration"):
    pass


class Configure(_NodeRequest, frozen=True, kw_only=True, tag="configure"):
    mutation: NodeConfigurationMutation


class ReadCredentials(_NodeRequest, frozen=True, kw_only=True, tag="credentials"):
    pass


class ConfigureCredential(_NodeRequest, frozen=True, kw_only=True, tag="configure_credential"):
    mutation: NodeCredentialMutation


class Preflight(_NodeRequest, frozen=True, kw_only=True, tag="preflight"):
    pass


class ReadSetup(_NodeRequest, frozen=True, kw_only=True, tag="setup"):
    pass


class ListProposals(_NodeRequest, frozen=True, kw_only=True, tag="proposal-list"):
    offset: int


class ReviewProposal(_Request, frozen=True, kw_only=True, tag="proposal-review"):
    reference: ProposalReference


class ApproveProposal(_Request, frozen=True, kw_only=True, tag="proposal-approve"):
    """``operator_id`` is the actor Skulk authenticated."""

    operator_id: str
    approval: ProposalApproval


class ProposalOperation(_NodeRequest, frozen=True, kw_only=True, tag="proposal-operation"):
    operation_id: str


class ResumeProposal(_NodeRequest, frozen=True, kw_only=True, tag="proposal-resume"):
    operator_id: str
    operation_id: str


class ListSetupActions(_NodeRequest, frozen=True, kw_only=True, tag="setup-actions"):
    pass


class StartSetup(_NodeRequest, frozen=True, kw_only=True, tag="setup-start"):
    start: SetupStart


class SetupOperation(_NodeRequest, frozen=True, kw_only=True, tag="setup-operation"):
    operation_id: str


class ResumeSetup(_NodeRequest, frozen=True, kw_only=True, tag="setup-resume"):
    operation_id: str


class Call(_Request, frozen=True, kw_only=True, tag="call"):
    """One unary invocation."""

    call: CapabilityCall


class Stream(_Request, frozen=True, kw_only=True, tag="stream"):
    """A streaming invocation's admission; the connection then carries packets."""

    call: CapabilityCall


UnaryRequest = (
    Health
    | Describe
    | Bind
    | ReadConfiguration
    | Configure
    | ReadCredentials
    | ConfigureCredential
    | Preflight
    | ReadSetup
    | ListProposals
    | ReviewProposal
    | ApproveProposal
    | ProposalOperation
    | ResumeProposal
    | ListSetupActions
    | StartSetup
    | SetupOperation
    | ResumeSetup
    | Call
)
"""What is answered with one response line."""
OwnerRequest = UnaryRequest | Stream

_DECODER: Final = msgspec.json.Decoder(OwnerRequest)
OPS: Final = frozenset(str(kind.__struct_config__.tag) for kind in get_args(OwnerRequest))


class _Op(msgspec.Struct):
    """Only the ``op`` of a request that did not decode, to say why."""

    op: object = None


_FIELD_REFUSALS: Final = (
    ("transport_node_id", "bind names a transport node id"),
    ("offset", "offset is an integer"),
    ("operator_id", "an action names its operator"),
)
_OBSERVATIONS: Final = frozenset({"proposal-operation", "proposal-resume"})


def op_of(request: OwnerRequest) -> str:
    return str(request.__struct_config__.tag)


def decode(raw: bytes) -> OwnerRequest | bytes:
    """The request ``raw`` carries, or the encoded refusal to answer it with."""
    try:
        request = _DECODER.decode(raw)
    except msgspec.ValidationError as invalid:
        return _refusal(raw, str(invalid))
    except msgspec.DecodeError:
        return wire.error("malformed", "the request is not JSON")
    if len(raw) > wire.request_limit(op_of(request)):
        return wire.error("too_large", "the request is over the owner protocol's bound")
    return request


def _refusal(raw: bytes, reason: str) -> bytes:
    """Why a JSON request does not decode, in the owner's own words for each case."""
    try:
        op = str(msgspec.json.decode(raw, type=_Op).op)
    except msgspec.ValidationError:
        return wire.error("malformed", "the request is not a JSON object")
    if len(raw) > wire.request_limit(op):
        return wire.error("too_large", "the request is over the owner protocol's bound")
    if op not in OPS:
        return wire.error("malformed", "unknown owner request")
    if op == "stream":
        return wire.error("malformed", "the stream request does not match the owner protocol")
    for field, message in _FIELD_REFUSALS:
        if _names(reason, field):
            return wire.error("malformed", message)
    if op in _OBSERVATIONS and (_names(reason, "node_id") or _names(reason, "operation_id")):
        return wire.error("malformed", "an observation names its node and operation")
    return wire.error("malformed", "the request does not match the owner protocol")


def _names(reason: str, field: str) -> bool:
    """Whether msgspec's ``reason`` is about the envelope's own ``field`` (missing:
    ``... field `offset```; invalid: ``... at `$.offset```)."""
    return f"field `{field}`" in reason or f"`$.{field}`" in reason
