"""A model placed on node B answers through node A's API: the request is served by
B's runner and the tokens stream back to A over the fabric's data plane, with
cancellation and client disconnects reaching B's runner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.chrome_trace import lanes, parse_chrome_trace
from tests.daemon.serving import DEMO, PROMPT, sse_lines, wait_for, wait_idle
from tests.daemon.test_cli_against_daemon import skulk
from tests.daemon.test_cluster import converged, node_id
from tests.daemon_process import DaemonProcess
from tests.lazy_sdk import openai

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[tuple[DaemonProcess, DaemonProcess, str]]:
    root = tmp_path_factory.mktemp("routing")
    front = DaemonProcess(root=root / "a", models_dir=shared_models_dir)
    host = DaemonProcess(
        root=root / "b",
        models_dir=shared_models_dir,
        peers=[front.fabric_address],
    )
    try:
        front.start()
        host.start()
        wait_for(lambda: converged([front, host], 2), "two nodes to converge", timeout=60)
        placed = httpx.post(
            f"{front.url}/place_instance",
            json={"model_id": DEMO, "context_tokens": 1024, "excluded_nodes": [node_id(front)]},
            timeout=60,
        )
        assert placed.status_code == 200, placed.text
        instance_id: str = placed.json()["instance_id"]
        wait_for(lambda: host.runner_status(instance_id) == "RunnerReady", "B's runner")
        wait_for(lambda: front.runner_status(instance_id) == "RunnerReady", "A to see it")
        yield front, host, instance_id
    finally:
        front.kill()
        host.kill()


def chat(daemon: DaemonProcess, **fields: object) -> httpx.Response:
    body = {"model": DEMO, "messages": PROMPT, "temperature": 0, "max_tokens": 8, **fields}
    return httpx.post(f"{daemon.url}/v1/chat/completions", json=body, timeout=120)


def test_a_request_to_another_node_is_served_by_the_hosting_runner(
    pair: tuple[DaemonProcess, DaemonProcess, str],
) -> None:
    front, host, _ = pair
    state = front.get("/state").json()
    instance = next(iter(state["instances"].values()))
    body = next(iter(instance.values()))
    assert list(body["shardAssignments"]["nodeToRunner"]) == [node_id(host)]
    through_front = chat(front).json()
    direct = chat(host).json()
    assert through_front["choices"][0]["message"] == direct["choices"][0]["message"]
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert [through_front["usage"][k] for k in counts] == [direct["usage"][k] for k in counts]
    # The same runner served both: the second request reused the first one's prompt cells.
    assert direct["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert through_front["usage"]["completion_tokens"] == 8


def test_streaming_through_another_node_with_the_sdk(
    pair: tuple[DaemonProcess, DaemonProcess, str],
) -> None:
    front, host, _ = pair
    client = openai.OpenAI(base_url=f"{front.url}/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model=DEMO,
        messages=PROMPT,  # type: ignore[arg-type]
        temperature=0,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["length"]
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 8
    assert text == chat(host).json()["choices"][0]["message"]["content"]


def test_cancel_on_the_front_node_stops_the_remote_runner(
    pair: tuple[DaemonProcess, DaemonProcess, str],
) -> None:
    front, host, instance_id = pair
    body = {"model": DEMO, "messages": PROMPT, "max_tokens": 900, "stream": True}
    with httpx.stream("POST", f"{front.url}/v1/chat/completions", json=body, timeout=120) as r:
        lines = sse_lines(r)
        command = next(ln for ln in lines if ln.startswith(": command_id ")).split()[-1]
        next(ln for ln in lines if ln.startswith("data: {"))
        cancelled = httpx.post(f"{front.url}/v1/cancel/{command}", timeout=30)
        assert cancelled.status_code == 200
        rest = list(lines)
    assert rest[-1] == "data: [DONE]"
    errors = [json.loads(ln[6:]) for ln in rest if ln.startswith('data: {"error"')]
    assert errors and errors[0]["error"]["code"] == "cancelled"
    wait_idle(host, instance_id)


def test_a_client_leaving_the_front_node_frees_the_remote_runner(
    pair: tuple[DaemonProcess, DaemonProcess, str],
) -> None:
    front, host, instance_id = pair
    body = {"model": DEMO, "messages": PROMPT, "max_tokens": 900, "stream": True}
    with httpx.stream("POST", f"{front.url}/v1/chat/completions", json=body, timeout=120) as r:
        lines = sse_lines(r)
        next(ln for ln in lines if ln.startswith("data: {"))
    wait_idle(host, instance_id)
    assert chat(front, max_tokens=2).status_code == 200


def test_a_routed_request_is_traced_on_every_node_it_crossed(
    pair: tuple[DaemonProcess, DaemonProcess, str], tmp_path: Path
) -> None:
    front, host, _ = pair
    assert httpx.put(f"{front.url}/v1/tracing", json={"enabled": True}, timeout=30).json() == {
        "enabled": True
    }
    try:
        # The switch is ordered through State: the host sees it too.
        wait_for(lambda: host.get("/v1/tracing").json()["enabled"], "B to trace as well")
        assert chat(front).status_code == 200

        def complete() -> str | None:
            for trace in front.get("/v1/traces/cluster").json()["traces"]:
                record = front.get(f"/v1/traces/cluster/{trace['taskId']}").json()
                lanes_seen = {s["lane"] for s in record["spans"]}
                if {"api", "runner rank 0", "master"} <= lanes_seen:
                    return str(trace["taskId"])
            return None

        task_id = wait_for(complete, "a trace spanning API, master and runner", timeout=20)
        raw = front.get(f"/v1/traces/cluster/{task_id}/raw")
        found = lanes(parse_chrome_trace(raw.text))
        assert found[f"node {node_id(front)}"] >= {"api"}
        assert found[f"node {node_id(host)}"] >= {"runner rank 0"}
        assert any("master" in lanes_of for lanes_of in found.values())
        record = front.get(f"/v1/traces/cluster/{task_id}").json()
        assert record["sourceNodes"] == sorted([node_id(front), node_id(host)])
        request = next(s for s in record["spans"] if s["name"] == "request")
        assert request["args"]["servedBy"] == node_id(host)
        # The CLI: list, and export what Perfetto opens.
        listed = skulk(front, "--json", "trace", "list")
        assert task_id in [t["taskId"] for t in json.loads(listed.stdout)["traces"]]
        exported = tmp_path / "trace.json"
        done = skulk(front, "trace", "export", task_id, "-o", str(exported))
        assert done.returncode == 0, done.stderr
        assert lanes(parse_chrome_trace(exported.read_text())) == found
    finally:
        httpx.put(f"{front.url}/v1/tracing", json={"enabled": False}, timeout=30)


def test_completions_through_another_node_with_the_sdk(
    pair: tuple[DaemonProcess, DaemonProcess, str],
) -> None:
    front, host, _ = pair
    prompt = "Count: one, two, three,"
    clients = [
        openai.OpenAI(base_url=f"{node.url}/v1", api_key="unused", max_retries=0)
        for node in (front, host)
    ]
    through_front, direct = (
        client.completions.create(model=DEMO, prompt=prompt, temperature=0, max_tokens=6)
        for client in clients
    )
    assert through_front.choices[0].text == direct.choices[0].text
    assert through_front.usage == direct.usage
    stream = clients[0].completions.create(
        model=DEMO, prompt=prompt, temperature=0, max_tokens=6, stream=True
    )
    assert "".join(c.text for chunk in stream for c in chunk.choices) == direct.choices[0].text
