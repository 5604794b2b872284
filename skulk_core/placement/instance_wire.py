"""Reading an instance back from its ``/state`` rendering (``POST /instance``).

``/state`` tags unions externally (``{"MlxRingInstance": {...}}``); msgspec tags
them internally (a ``type`` field). This is the inverse of
:func:`skulk_core.wire.to_wire` for exactly the tagged values an instance holds: the
instance itself and each shard's metadata.
"""

from __future__ import annotations

from typing import Final

import msgspec

from skulk_core.state.shards import (
    Instance,
    LlamaRpcInstance,
    MlxJacclInstance,
    MlxRingInstance,
    PipelineShardMetadata,
    RpcDonorShardMetadata,
    TensorShardMetadata,
)

# msgspec's internal tag field for ``tag=True`` structs.
_TAG_FIELD: Final = "type"
INSTANCE_TAGS: Final = frozenset(
    str(kind.__struct_config__.tag)
    for kind in (MlxRingInstance, MlxJacclInstance, LlamaRpcInstance)
)
SHARD_TAGS: Final = frozenset(
    str(kind.__struct_config__.tag)
    for kind in (PipelineShardMetadata, TensorShardMetadata, RpcDonorShardMetadata)
)


class InstanceWireError(ValueError):
    """The document is not an instance in ``/state`` form; the message says where."""


def _untag(value: object, tags: frozenset[str], what: str) -> dict[str, object]:
    if not isinstance(value, dict) or len(value) != 1:
        raise InstanceWireError(f"{what} must be an object with one key, one of {sorted(tags)}")
    [(tag, body)] = value.items()
    if tag not in tags:
        raise InstanceWireError(f"{what} has unknown kind {tag!r}; expected one of {sorted(tags)}")
    if not isinstance(body, dict):
        raise InstanceWireError(f"{what} {tag} must be an object")
    if _TAG_FIELD in body:
        raise InstanceWireError(f"{what} {tag} has an unexpected field {_TAG_FIELD!r}")
    return {**body, _TAG_FIELD: tag}


def instance_from_wire(document: object) -> Instance:
    """Decode an externally tagged, camelCase instance; raises :class:`InstanceWireError`."""
    body = _untag(document, INSTANCE_TAGS, "instance")
    assignments = body.get("shardAssignments")
    if isinstance(assignments, dict):
        shards = assignments.get("runnerToShard")
        if isinstance(shards, dict):
            assignments = {
                **assignments,
                "runnerToShard": {
                    runner: _untag(shard, SHARD_TAGS, f"runnerToShard[{runner!r}]")
                    for runner, shard in shards.items()
                },
            }
        body["shardAssignments"] = assignments
    try:
        instance: Instance = msgspec.convert(body, Instance)
        return instance
    except msgspec.ValidationError as exc:
        raise InstanceWireError(f"invalid instance: {exc}") from None
