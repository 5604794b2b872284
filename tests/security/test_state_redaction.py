"""A running task's command id (what cancels it) is not shown to untrusted readers."""

from __future__ import annotations

from skulk_core.wire import JsonValue
from skulk_daemon.api.state import without_command_ids


def test_command_ids_are_left_out_and_nothing_else() -> None:
    document: dict[str, JsonValue] = {
        "tasks": {
            "t1": {"taskId": "t1", "commandId": "secret-1", "instanceId": "i1"},
            "t2": {"taskId": "t2", "commandId": "secret-2", "instanceId": "i1"},
        },
        "instances": {"i1": {"commandId": "not a task"}},
    }
    without_command_ids(document)
    assert document == {
        "tasks": {
            "t1": {"taskId": "t1", "instanceId": "i1"},
            "t2": {"taskId": "t2", "instanceId": "i1"},
        },
        "instances": {"i1": {"commandId": "not a task"}},
    }
