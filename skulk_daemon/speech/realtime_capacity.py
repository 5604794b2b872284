"""Where a realtime transcription call may run on this node, and the one call each
instance takes at a time (the reservation is local; the runner has one streaming
session). The provider (:mod:`.realtime_provider`) asks :meth:`RealtimeCapacity.check`
before it reserves, and releases when the call ends however it ends."""

from __future__ import annotations

from skulk_core.extensions.capabilities import CapabilityError
from skulk_core.ids import InstanceId, ModelId
from skulk_core.models.cards import ModelTask
from skulk_core.state.shards import RunnerReady, RunnerRunning, serving_node
from skulk_daemon.node.node import Node


def realtime_error(code: str, message: str) -> CapabilityError:
    """A provider refusal with the capability contract's code for ``code``."""
    match code:
        case "not_found" | "overloaded" | "unreachable" | "invalid_payload" | "timeout":
            return CapabilityError(code=code, message=message)
        case "payload_too_large":
            return CapabilityError(code="payload_too_large", message=message)
        case _:
            return CapabilityError(code="provider_error", message=message)


class RealtimeCapacity:
    """Which mounted models serve realtime here, and the one-call-per-instance reservation."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._reserved: set[InstanceId] = set()

    def realtime_models(self) -> list[ModelId]:
        catalog = self._node.catalog()
        return [
            ModelId(model_id)
            for model_id, entry in catalog.by_id.items()
            if ModelTask.SPEECH_TO_TEXT in entry.card.tasks
            and entry.card.audio is not None
            and entry.card.audio.supports_realtime
        ]

    def ready_local(self, model_id: ModelId) -> list[InstanceId]:
        state = self._node.state
        found = []
        for instance in state.instances.values():
            runners = instance.shard_assignments.runner_to_shard
            if (
                instance.shard_assignments.model_id == model_id
                and len(runners) == 1
                and serving_node(instance) == self._node.node_id
                and all(
                    isinstance(state.runners.get(r), RunnerReady | RunnerRunning) for r in runners
                )
            ):
                found.append(instance.instance_id)
        return sorted(found)

    def check(self, model: str) -> CapabilityError | InstanceId:
        """The instance a call for ``model`` would use now, or why there is none."""
        entry = self._node.catalog().get(ModelId(model))
        if entry is None:
            return realtime_error("not_found", f"model {model} is not in this node's catalog")
        audio = entry.card.audio
        if ModelTask.SPEECH_TO_TEXT not in entry.card.tasks or audio is None:
            return realtime_error("invalid_payload", f"model {model} is not a speech-to-text model")
        if not audio.supports_realtime:
            return realtime_error(
                "invalid_payload",
                f"model {model} does not declare realtime transcription "
                "(audio.supports_realtime); use POST /v1/audio/transcriptions",
            )
        ready = self.ready_local(ModelId(model))
        if not ready:
            return realtime_error(
                "unreachable",
                f"no ready runner of {model} on this node serves realtime transcription",
            )
        free = [i for i in ready if i not in self._reserved]
        if not free:
            return realtime_error(
                "overloaded", f"every instance of {model} is serving a realtime call"
            )
        return free[0]

    def reserve(self, instance_id: InstanceId) -> None:
        self._reserved.add(instance_id)

    def release(self, instance_id: InstanceId) -> None:
        self._reserved.discard(instance_id)
