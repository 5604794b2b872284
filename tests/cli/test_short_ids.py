"""Ids at 80 columns: `status` shows unique prefixes that fit, `--wide` the whole ids."""

from __future__ import annotations

import json

from rich.console import Console

from skulk_cli.render_diagnostics import timeline
from skulk_cli.short_ids import unique_prefixes
from skulk_core.diagnostics.answers import Timeline, TimelineEntry, TimelineRunner

from .fake_node import STATE, FakeNode
from .test_cli import line_with, plain, run

INSTANCE = "3f2a9c1e-0b4d-4e8a-9f00-7c1d2e3f4a5b"
RUNNER_A = "a81c44d0-1111-4a2b-8c3d-000000000001"
RUNNER_B = "a81c44d0-2222-4a2b-8c3d-000000000002"  # shares 9 characters with RUNNER_A


def test_prefixes_are_the_shortest_unique_ones_of_at_least_eight() -> None:
    shortened = unique_prefixes([INSTANCE, RUNNER_A, RUNNER_B])

    assert shortened[INSTANCE] == "3f2a9c1e"
    assert shortened[RUNNER_A] == "a81c44d0-1"
    assert shortened[RUNNER_B] == "a81c44d0-2"
    assert unique_prefixes(["abc", "abcdefghij"]) == {"abc": "abc", "abcdefghij": "abcdefgh"}


def _uuid_state() -> dict[str, object]:
    text = json.dumps(STATE)
    for old, new in (("inst-1", INSTANCE), ("runner-1", RUNNER_A), ("runner-2", RUNNER_B)):
        text = text.replace(old, new)
    state: dict[str, object] = json.loads(text)
    return state


def test_status_fits_uuids_into_80_columns(node: FakeNode) -> None:
    node.routes[("GET", "/state")] = (200, _uuid_state())

    result = run("--api-url", node.url, "status", env={"COLUMNS": "80"})

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    assert all(len(line) <= 80 for line in out.splitlines())
    assert INSTANCE not in out
    assert "gemma-3-270m-q4" in line_with(out, "3f2a9c1e")
    assert "ready" in line_with(out, "a81c44d0-1")
    assert "out of memory" in " ".join(out.split())
    assert "a81c44d0-2" in out


def test_status_wide_shows_the_whole_ids(node: FakeNode) -> None:
    node.routes[("GET", "/state")] = (200, _uuid_state())

    result = run("--api-url", node.url, "status", "--wide", env={"COLUMNS": "200"})

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    assert INSTANCE in out and RUNNER_A in out and RUNNER_B in out


PEER = "12D3KooWFeANbFnCMpddndbHLbBti6Afsx6q3y3nwKnrLEDWCmor"


def test_the_timeline_fits_80_columns_and_wide_shows_everything() -> None:
    runner = TimelineRunner(
        runner_id=RUNNER_A,
        instance_id=INSTANCE,
        model_id="local/gemma-3-270m-q4_k_m",
        status_kind="RunnerLoading",
        phase="loading",
        seconds_in_phase=12.0,
        phase_budget_seconds=300.0,
        supervisor_phase="loading",
        device_rank=0,
        world_size=1,
        rpc_donor=False,
        active_tasks=0,
        task_ids=[],
        pid=None,
        failure=None,
        node_id=PEER,
    )
    entry = TimelineEntry(
        at="2026-12-06T01:02:03.456789+00:00",
        runner_id=RUNNER_A,
        event="phase",
        phase="loading",
        node_id=PEER,
    )
    merged = Timeline(node_id=PEER, runners=[runner], entries=[entry], unreachable_nodes=[])

    def shown(wide: bool, width: int) -> str:
        console = Console(width=width, record=True, color_system=None)
        console.print(timeline(merged, wide=wide))
        return console.export_text()

    narrow = shown(False, 80)
    assert all(len(line) <= 80 for line in narrow.splitlines())
    assert "01:02:03.456" in narrow and "a81c44d0" in narrow and PEER[:12] in narrow
    assert RUNNER_A not in narrow
    whole = shown(True, 250)
    assert RUNNER_A in whole and PEER in whole and entry.at in whole
