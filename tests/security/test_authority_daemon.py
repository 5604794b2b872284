"""The request-authority policy on a real daemon, from real peers of each trust class.

One daemon listens on every address; callers are this machine (loopback) and another
"machine" in a network namespace reaching it as a private-LAN, a CGNAT or a public
peer (see lan.py). Each refusal is checked for its status and envelope, and for
leaving nothing changed. The dashboard loads for a browser on the LAN, with the same
strict headers, and a DNS-rebound name is refused there as on every route.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from skulk_daemon.api.dashboard import CONTENT_SECURITY_POLICY
from tests.daemon.serving import PROMPT, place, sse_lines, wait_idle
from tests.daemon_process import DaemonProcess
from tests.security.lan import CGNAT_HOST, PRIVATE_HOST, PUBLIC_HOST, Caller, Lan

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("network")]

API_KEY = "sk-skulk-test-0123456789abcdef0123456789"
DEMO = "local/gemma-3-270m-q4_k_m"
PLACE = {"model_id": DEMO, "min_nodes": 1, "context_tokens": 1024}


def _daemon(root: Path, models: Path, **env: str) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess(
        root=root, models_dir=models, extra_args=["--host", "0.0.0.0"], extra_env=env
    )
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.kill()


@pytest.fixture(scope="module")
def node(
    network: Lan, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    # The namespace exists before the daemon starts, so its addresses are the node's own.
    yield from _daemon(tmp_path_factory.mktemp("authority"), shared_models_dir)


@pytest.fixture(scope="module")
def keyed(
    network: Lan, tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    yield from _daemon(tmp_path_factory.mktemp("keyed"), shared_models_dir, SKULK_API_KEYS=API_KEY)


def _url(daemon: DaemonProcess, host: str, path: str) -> str:
    return f"http://{host}:{daemon.port}{path}"


def _refused(result: dict[str, Any], status: int, code: str) -> None:
    assert result["status"] == status, result
    body = httpx.Response(200, text=result["body"]).json()
    assert body["error"]["code"] == code, body
    assert body["error"]["message"], body


def _instances(daemon: DaemonProcess) -> dict[str, Any]:
    instances: dict[str, Any] = daemon.get("/state").json()["instances"]
    return instances


def _config(daemon: DaemonProcess) -> dict[str, Any]:
    config: dict[str, Any] = daemon.get("/config").json()["config"]
    return config


def test_a_public_peer_reads_but_cannot_change_anything(node: DaemonProcess, network: Lan) -> None:
    config_before = _config(node)
    results = network.requests(
        {"method": "GET", "url": _url(node, PUBLIC_HOST, "/v1/models")},
        {"method": "GET", "url": _url(node, PUBLIC_HOST, "/state")},
        {"method": "POST", "url": _url(node, PUBLIC_HOST, "/place_instance"), "json": PLACE},
        {"method": "PUT", "url": _url(node, PUBLIC_HOST, "/config"), "json": config_before},
        {"method": "DELETE", "url": _url(node, PUBLIC_HOST, "/instance/anything")},
        {"method": "DELETE", "url": _url(node, PUBLIC_HOST, "/models/custom/a/b")},
        {"method": "POST", "url": _url(node, PUBLIC_HOST, "/onboarding"), "json": {}},
        {"method": "GET", "url": _url(node, PUBLIC_HOST, "/events")},
        {
            "method": "POST",
            "url": _url(node, PUBLIC_HOST, "/models/add-card"),
            "json": {"model_card": {}},
        },
    )
    models, state, *changes = results
    assert models["status"] == 200
    assert state["status"] == 200
    for refused in changes[:-1]:
        _refused(refused, 403, "untrusted_peer")
    _refused(changes[-1], 403, "loopback_required")
    assert _instances(node) == {}
    assert _config(node) == config_before


def test_private_lan_and_cgnat_peers_are_the_trusted_fabric(
    node: DaemonProcess, network: Lan
) -> None:
    config = _config(node)
    lowered = {**config, "logging": {**config["logging"], "level": "debug"}}
    retarget = {**config, "cluster": {**config["cluster"], "peers": ["203.0.113.9:52416"]}}
    private, cgnat, secrets, add_card = network.requests(
        {"method": "PUT", "url": _url(node, PRIVATE_HOST, "/config"), "json": lowered},
        {"method": "PUT", "url": _url(node, CGNAT_HOST, "/config"), "json": config},
        {"method": "PUT", "url": _url(node, PRIVATE_HOST, "/config"), "json": retarget},
        {
            "method": "POST",
            "url": _url(node, PRIVATE_HOST, "/models/add-card"),
            "json": {"model_card": {}},
        },
    )
    assert private["status"] == 200, private
    assert cgnat["status"] == 200, cgnat
    # What changes whom the node trusts is for this machine or the operator gateway.
    _refused(secrets, 403, "loopback_required")
    _refused(add_card, 403, "loopback_required")
    assert _config(node)["cluster"]["peers"] == config["cluster"]["peers"]


@pytest.mark.parametrize(
    "change",
    [
        {"model_store": {"store_host": True}},
        {"model_store": {"store_path": "/srv/chosen-by-a-caller"}},
        {"model_store": {"store_port": 52499}},
        {"hf_token": "hf_swapped_identity_0123456789"},
    ],
    ids=["store_host", "store_path", "store_port", "hf_token"],
)
def test_the_store_and_the_hub_identity_are_for_this_machine(
    node: DaemonProcess, network: Lan, change: dict[str, Any]
) -> None:
    # Issue #36: a LAN caller with no key turned a node into a store host serving a
    # directory of its choosing, and another swapped its Hugging Face identity.
    config = _config(node)
    changed = {
        **config,
        **{k: {**config.get(k, {}), **v} if isinstance(v, dict) else v for k, v in change.items()},
    }
    private, cgnat = network.requests(
        {"method": "PUT", "url": _url(node, PRIVATE_HOST, "/config"), "json": changed},
        {"method": "PUT", "url": _url(node, CGNAT_HOST, "/config"), "json": changed},
    )
    _refused(private, 403, "loopback_required")
    _refused(cgnat, 403, "loopback_required")
    assert _config(node) == config


def test_this_machine_may_still_change_the_store_and_the_hub_identity(node: DaemonProcess) -> None:
    config = _config(node)
    moved = {
        **config,
        "model_store": {**config["model_store"], "store_port": 52499},
        "hf_token": "hf_this_machines_own_token_0123456789",
    }
    assert httpx.put(f"{node.url}/config", json=moved, timeout=30).status_code == 200
    try:
        assert _config(node)["model_store"]["store_port"] == 52499
    finally:
        restored = httpx.put(f"{node.url}/config", json=config, timeout=30)
        assert restored.status_code == 200, restored.text


def test_proxied_and_cross_site_requests_are_refused(node: DaemonProcess, network: Lan) -> None:
    forwarded, cross_site, lan_page = network.requests(
        {
            "method": "POST",
            "url": _url(node, PRIVATE_HOST, "/place_instance"),
            "json": PLACE,
            "headers": {"X-Forwarded-For": "10.77.0.9"},
        },
        {
            "method": "POST",
            "url": _url(node, PRIVATE_HOST, "/place_instance"),
            "json": PLACE,
            "headers": {"Origin": "https://evil.example"},
        },
        {
            "method": "GET",
            "url": _url(node, PRIVATE_HOST, "/state"),
            "headers": {"Origin": "https://evil.example"},
        },
    )
    _refused(forwarded, 403, "forwarded_request")
    _refused(cross_site, 403, "cross_origin")
    assert lan_page["status"] == 200  # reading is not a change
    assert _instances(node) == {}


def test_dns_rebinding_and_simple_requests_are_refused_on_loopback(node: DaemonProcess) -> None:
    rebound = httpx.post(
        f"{node.url}/place_instance", json=PLACE, headers={"Host": "evil.example"}, timeout=30
    )
    assert rebound.status_code == 421
    assert rebound.json()["error"]["code"] == "misdirected_host"
    read = httpx.get(f"{node.url}/state", headers={"Host": "evil.example:52415"}, timeout=30)
    assert read.status_code == 421
    simple = httpx.post(
        f"{node.url}/place_instance",
        content=httpx.Response(200, json=PLACE).content,
        headers={"Content-Type": "text/plain"},
        timeout=30,
    )
    assert simple.status_code == 415
    assert simple.json()["error"]["code"] == "unsupported_media_type"
    page = httpx.put(
        f"{node.url}/config",
        json=_config(node),
        headers={"Origin": "https://evil.example"},
        timeout=30,
    )
    assert page.status_code == 403
    assert _instances(node) == {}
    # Every refusal is counted by reason.
    counted = node.get("/v1/diagnostics/node").json()["authorityRefusals"]
    assert counted["misdirected_host"] >= 2
    assert counted["unsupported_media_type"] >= 1
    assert counted["cross_origin"] >= 1


def test_a_lan_browser_loads_the_dashboard(node: DaemonProcess, network: Lan) -> None:
    base = f"http://{PRIVATE_HOST}:{node.port}"
    page, script, state = network.requests(
        {"method": "GET", "url": f"{base}/cluster"},
        {"method": "GET", "url": f"{base}/ui/app.js", "headers": {"Origin": base}},
        {"method": "GET", "url": f"{base}/state", "headers": {"Origin": base}},
    )
    assert page["status"] == 200, page
    assert '<script type="module" src="/ui/app.js"></script>' in page["body"]
    assert page["headers"]["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert script["status"] == 200 and "export" in script["body"]
    assert script["headers"]["content-type"] == "text/javascript; charset=utf-8"
    assert state["status"] == 200, state


def test_a_rebound_name_is_refused_on_the_lan_dashboard(node: DaemonProcess, network: Lan) -> None:
    (refused,) = network.requests(
        {
            "method": "GET",
            "url": f"http://{PRIVATE_HOST}:{node.port}/cluster",
            "headers": {"Host": f"attacker.example:{node.port}"},
        }
    )
    assert refused["status"] == 421, refused


def test_api_keys_are_required_from_other_machines_only(keyed: DaemonProcess, network: Lan) -> None:
    bare, bearer, anthropic_style, wrong = network.requests(
        {"method": "GET", "url": _url(keyed, PRIVATE_HOST, "/v1/models")},
        {
            "method": "GET",
            "url": _url(keyed, PRIVATE_HOST, "/v1/models"),
            "headers": {"Authorization": f"Bearer {API_KEY}"},
        },
        {
            "method": "GET",
            "url": _url(keyed, PRIVATE_HOST, "/v1/models"),
            "headers": {"x-api-key": API_KEY},
        },
        {
            "method": "GET",
            "url": _url(keyed, PRIVATE_HOST, "/v1/models"),
            "headers": {"Authorization": f"Bearer {API_KEY}x"},
        },
    )
    _refused(bare, 401, "invalid_api_key")
    assert bare["headers"].get("www-authenticate") == "Bearer"
    assert bearer["status"] == 200
    assert anthropic_style["status"] == 200
    _refused(wrong, 401, "invalid_api_key")
    assert keyed.get("/v1/models").status_code == 200  # this machine needs no key
    # The key is a secret: never in GET /config, never in the log.
    assert API_KEY not in httpx.get(f"{keyed.url}/config", timeout=30).text
    assert API_KEY not in keyed.log_text()


def test_the_official_sdk_passes_its_api_key(keyed: DaemonProcess, network: Lan) -> None:
    script = (
        "import openai, sys\n"
        f"client = openai.OpenAI(base_url='http://{PRIVATE_HOST}:{keyed.port}/v1', "
        f"api_key=sys.argv[1], max_retries=0)\n"
        "print(len(client.models.list().data))\n"
        "wrong = openai.OpenAI(base_url=client.base_url, api_key='wrong', max_retries=0)\n"
        "try:\n"
        "    wrong.models.list()\n"
        "except openai.AuthenticationError:\n"
        "    print('refused')\n"
    )
    done = subprocess.run(
        ["ip", "netns", "exec", network.namespace, sys.executable, "-c", script, API_KEY],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    count, refused = done.stdout.split()
    assert int(count) >= 1
    assert refused == "refused"


def test_only_the_trusted_fabric_sees_what_cancels_a_generation(
    node: DaemonProcess, network: Lan
) -> None:
    # Last of the `node` tests: it places the demo model (and deletes it again).
    # The other machine's caller starts first: the generation runs only while it asks.
    with contextlib.closing(network.caller()) as caller:
        _watch_a_generation(node, caller)


def _watch_a_generation(node: DaemonProcess, caller: Caller) -> None:
    instance_id = place(node)
    body = {"model": DEMO, "messages": PROMPT, "max_tokens": 900, "stream": True}
    try:
        with httpx.stream("POST", f"{node.url}/v1/chat/completions", json=body, timeout=120) as r:
            lines = sse_lines(r)
            command = next(ln for ln in lines if ln.startswith(": command_id ")).split()[-1]
            next(ln for ln in lines if ln.startswith("data: {"))
            public, private = caller.send(
                {"method": "GET", "url": _url(node, PUBLIC_HOST, "/state")},
                {"method": "GET", "url": _url(node, PRIVATE_HOST, "/state")},
            )
            local = node.get("/state").json()["tasks"]
            seen = {
                name: httpx.Response(200, text=result["body"]).json()["tasks"]
                for name, result in (("public", public), ("private", private))
            }
            # Everyone sees that a generation runs; only this machine and the LAN see
            # the id that cancels it.
            assert [t["taskId"] for t in seen["public"].values()] == list(local)
            assert all("commandId" not in task for task in seen["public"].values())
            assert command not in public["body"]
            assert [t["commandId"] for t in seen["private"].values()] == [command]
            assert [t["commandId"] for t in local.values()] == [command]
            assert node.post(f"/v1/cancel/{command}").status_code == 200
            list(lines)
    finally:
        wait_idle(node, instance_id)
        assert httpx.delete(f"{node.url}/instance/{instance_id}", timeout=30).status_code == 200
