"""Instance ids as a person types them: a unique prefix is enough.

Instance ids are UUIDs, too long to type; like git's short hashes and Docker's short
container ids, any prefix that names exactly one placed instance stands for it.
"""

from __future__ import annotations

from skulk_cli import views


class AmbiguousInstanceId(Exception):
    """A prefix that starts more than one instance id; the message lists them."""

    def __init__(self, prefix: str, candidates: list[tuple[str, str]]) -> None:
        listed = "; ".join(f"{instance_id} ({model})" for instance_id, model in candidates)
        super().__init__(f"{prefix!r} starts {len(candidates)} instance ids: {listed}")
        self.candidates = candidates


def resolve_instance_id(given: str, state: views.ClusterState) -> str:
    """The one placed instance whose id is ``given`` or starts with it.

    ``given`` comes back unchanged when no instance matches, so the node answers for
    an id it does not know (404, or one placed a moment ago). Raises
    :class:`AmbiguousInstanceId` when several match.
    """
    wanted = given.strip().lower()
    if not wanted or given in state.instances:
        return given
    matches = sorted(i for i in state.instances if i.lower().startswith(wanted))
    if len(matches) == 1:
        return matches[0]
    if not matches:
        return given
    raise AmbiguousInstanceId(given, [(i, _model_of(state, i)) for i in matches])


def placed_instances(state: views.ClusterState, model: str) -> list[str]:
    """The ids of ``model``'s instances, in id order."""
    return sorted(
        instance_id
        for instance_id, tagged in state.instances.items()
        if (found := views.untag(tagged)) is not None
        and found[1].shard_assignments.model_id == model
    )


def short(instance_id: str) -> str:
    """The first 8 characters: what a person types for an id (a prefix is enough)."""
    return instance_id[:8]


def _model_of(state: views.ClusterState, instance_id: str) -> str:
    found = views.untag(state.instances.get(instance_id, {}))
    return found[1].shard_assignments.model_id if found else "?"
