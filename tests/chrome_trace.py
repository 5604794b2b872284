"""A checker for Chrome trace JSON (the Trace Event Format's JSON Object Format), the
way Perfetto and chrome://tracing read it: what a trace must be for them to open it."""

from __future__ import annotations

import json
from typing import Any

_PHASES_WITH_DURATION = {"X"}
_INSTANT = {"i", "I"}
_METADATA = {"M"}


def parse_chrome_trace(text: str) -> dict[str, Any]:
    """Parse ``text`` and check it event by event; raise AssertionError naming the first
    problem. Returns the document."""
    document = json.loads(text)
    assert isinstance(document, dict), "a trace is a JSON object"
    events = document.get("traceEvents")
    assert isinstance(events, list) and events, "traceEvents is a non-empty list"
    names: dict[tuple[int, int], str] = {}
    processes: dict[int, str] = {}
    for index, event in enumerate(events):
        where = f"traceEvents[{index}]"
        assert isinstance(event, dict), f"{where} is an object"
        phase = event.get("ph")
        assert isinstance(phase, str), f"{where}.ph is a string"
        assert isinstance(event.get("pid"), int), f"{where}.pid is an integer"
        assert isinstance(event.get("tid"), int), f"{where}.tid is an integer"
        assert isinstance(event.get("name"), str) and event["name"], f"{where}.name"
        if phase in _METADATA:
            label = event.get("args", {}).get("name")
            assert isinstance(label, str), f"{where}: metadata names something"
            if event["name"] == "process_name":
                processes[event["pid"]] = label
            elif event["name"] == "thread_name":
                names[(event["pid"], event["tid"])] = label
            continue
        assert isinstance(event.get("ts"), int | float), f"{where}.ts is a number"
        if phase in _PHASES_WITH_DURATION:
            duration = event.get("dur")
            assert isinstance(duration, int | float) and duration >= 0, f"{where}.dur >= 0"
        else:
            assert phase in _INSTANT, f"{where}: unexpected phase {phase!r}"
            assert event.get("s", "t") in ("g", "p", "t"), f"{where}.s is a scope"
        assert event["pid"] in processes, f"{where}: its process is named"
        assert (event["pid"], event["tid"]) in names, f"{where}: its thread is named"
    if "displayTimeUnit" in document:
        assert document["displayTimeUnit"] in ("ms", "ns")
    return document


def lanes(document: dict[str, Any]) -> dict[str, set[str]]:
    """Process name -> the thread (lane) names that carry events."""
    processes = {
        e["pid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"
    }
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in document["traceEvents"]
        if e["name"] == "thread_name"
    }
    found: dict[str, set[str]] = {}
    for event in document["traceEvents"]:
        if event["ph"] != "M":
            found.setdefault(processes[event["pid"]], set()).add(
                threads[(event["pid"], event["tid"])]
            )
    return found
