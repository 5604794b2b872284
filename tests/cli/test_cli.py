"""What a user sees from `skulk`, against a node answering over real HTTP."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from skulk_cli.commands import serve
from skulk_cli.main import app

from .fake_node import CONFIG, IDENTITY, MODELS, PEER_NODE, STATE, THIS_NODE, FakeNode

ANSI = re.compile(r"\x1b\[[0-9;]*m")
BOX = re.compile(r"[│╭╮╰╯─]")
# A fixed, ordinary terminal width, whatever terminal pytest itself runs in.
TERMINAL = {"COLUMNS": "100", "LINES": "40"}
runner = CliRunner()


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, list(args), env={**TERMINAL, **(env or {})}, prog_name="skulk")


def plain(text: str) -> str:
    return ANSI.sub("", text)


def flat(text: str) -> str:
    """Messages with wrapping and panel borders removed, for sentence matching."""
    return " ".join(BOX.sub(" ", plain(text)).split())


def line_with(text: str, needle: str) -> str:
    """The first table row (or, for plain output, line) that contains ``needle``."""
    lines = plain(text).splitlines()
    rows = [line for line in lines if "│" in line] or lines
    matches = [line for line in rows if needle in line]
    assert matches, f"{needle!r} not in output:\n{text}"
    return matches[0]


# --- status -------------------------------------------------------------------------


def test_status_shows_this_node_memory_instances_runners_and_health(node: FakeNode) -> None:
    result = run("--api-url", node.url, "status")

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    assert THIS_NODE in out and "alpha" in out and "192.168.1.10" in out
    this_row = line_with(out, THIS_NODE)
    assert "alpha *" in this_row and "6.0 GiB / 16.0 GiB" in this_row and "ok" in this_row
    peer_row = line_with(out, PEER_NODE)
    assert "bravo" in peer_row and "48.0 GiB / 64.0 GiB" in peer_row and "warn" in peer_row
    assert "models volume is 95% full" in out
    assert "free space under SKULK_MODELS_DIR" in out
    instance_row = line_with(out, "inst-1")
    assert "gemma-3-270m-q4" in instance_row and "MlxRing" in instance_row
    assert "32,768" in instance_row
    assert "ready" in line_with(out, "runner-1")
    assert "failed: out of memory" in line_with(out, "runner-2")
    assert [(r.method, r.path) for r in node.requests] == [
        ("GET", "/node/identity"),
        ("GET", "/state"),
    ]


def test_status_shows_the_cluster_master_and_each_node_role(node: FakeNode) -> None:
    state = dict(node.routes[("GET", "/state")][1])
    state.update(
        topology={"nodes": [THIS_NODE, PEER_NODE], "connections": []},
        masterNodeId=PEER_NODE,
        electionTerm=3,
    )
    node.routes[("GET", "/state")] = (200, state)

    result = run("--api-url", node.url, "status")

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    assert "Cluster of 2 node(s); master bravo (term 3)" in out
    assert "follower" in line_with(out, THIS_NODE)
    assert "master" in line_with(out, PEER_NODE)


def test_status_before_an_election_says_no_master(node: FakeNode) -> None:
    result = run("--api-url", node.url, "status")

    assert result.exit_code == 0, result.output
    assert "no master elected yet" in plain(result.stdout)


def test_status_shortens_long_peer_ids_in_tables_but_not_in_the_heading(node: FakeNode) -> None:
    peer_id = "12D3KooWFeANbFnCMpddndbHLbBti6Afsx6q3y3nwKnrLEDWCmor"
    node.routes[("GET", "/node/identity")] = (200, {**IDENTITY, "nodeId": peer_id})
    memory = {"ramTotal": {"inBytes": 8 << 30}, "ramAvailable": {"inBytes": 2 << 30}}
    node.routes[("GET", "/state")] = (200, {"nodeMemory": {peer_id: memory}})

    result = run("--api-url", node.url, "status")

    assert result.exit_code == 0, result.output
    assert peer_id in plain(result.stdout).splitlines()[0]
    assert "2.0 GiB / 8.0 GiB" in line_with(result.stdout, "12D3KooW…LEDWCmor")


def test_status_of_an_empty_cluster_says_so(node: FakeNode) -> None:
    node.routes[("GET", "/state")] = (200, {"instances": {}, "runners": {}})

    result = run("--api-url", node.url, "status")

    assert result.exit_code == 0, result.output
    assert "No instances placed." in plain(result.stdout)


def test_status_json_is_both_raw_responses(node: FakeNode) -> None:
    result = run("--api-url", node.url, "--json", "status")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"identity": IDENTITY, "state": STATE}


# --- models -------------------------------------------------------------------------


def test_models_list_shows_ids_and_which_are_installed(node: FakeNode) -> None:
    result = run("--api-url", node.url, "models", "list")

    assert result.exit_code == 0, result.output
    installed = line_with(result.stdout, "gemma-3-270m-q4")
    assert "installed" in installed and "32,768" in installed and "253.0 MiB" in installed
    available = line_with(result.stdout, "qwen3-8b-q4")
    assert "installed" not in available.replace("not downloaded", "")
    assert "registry" in available and "5.0 GiB" in available
    lines = plain(result.stdout).splitlines()
    assert lines.index(installed) < lines.index(available), "installed models come first"


@pytest.mark.parametrize(
    "args",
    [("--json", "models", "list"), ("models", "list", "--json")],
    ids=["global-flag", "command-flag"],
)
def test_models_list_json_is_the_raw_response(node: FakeNode, args: tuple[str, ...]) -> None:
    result = run("--api-url", node.url, *args)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == MODELS


# --- config -------------------------------------------------------------------------


def test_config_show_lists_dotted_keys_and_effective_values(node: FakeNode) -> None:
    result = run("--api-url", node.url, "config", "show")

    assert result.exit_code == 0, result.output
    out = plain(result.stdout)
    assert "/home/op/.config/skulk/skulk.yaml" in out
    assert "info" in line_with(out, "logging.level")
    assert "40.0" in line_with(out, "model_store.staging.staging_keep_recent_gb")
    assert "null" in line_with(out, "inference.max_output_tokens")
    assert "false" in line_with(out, "has_hf_token")


def test_config_show_json_is_the_raw_response(node: FakeNode) -> None:
    result = run("--api-url", node.url, "config", "show", "--json")

    assert json.loads(result.stdout) == CONFIG


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("logging.level", "debug", "debug"),
        ("inference.max_output_tokens", "4096", 4096),
        ("telemetry.enabled", "true", True),
        ("node.friendly_name", "null", None),
        ("cluster.peers", '["10.0.0.2:52416"]', ["10.0.0.2:52416"]),
    ],
)
def test_config_set_sends_the_full_document_with_one_value_changed(
    node: FakeNode, key: str, value: str, expected: object
) -> None:
    section, leaf = key.split(".")
    result = run("--api-url", node.url, "config", "set", key, value)

    assert result.exit_code == 0, result.output
    puts = [r for r in node.requests if r.method == "PUT"]
    assert len(puts) == 1 and puts[0].path == "/config"
    wanted = copy.deepcopy(CONFIG["config"])
    wanted[section][leaf] = expected
    assert puts[0].body == {"config": wanted}
    assert f"Set {key} to" in plain(result.stdout)


def test_config_set_reports_the_old_value(node: FakeNode) -> None:
    result = run("--api-url", node.url, "config", "set", "logging.level", "debug")

    assert "Set logging.level to debug (was info)" in plain(result.stdout)


def test_config_set_never_echoes_a_secret(node: FakeNode) -> None:
    result = run("--api-url", node.url, "config", "set", "hf_token", "hf_s3cr3t")

    assert result.exit_code == 0, result.output
    assert "hf_s3cr3t" not in result.output
    assert "Set hf_token (value hidden)." in plain(result.stdout)
    assert node.requests[-1].body == {"config": {**CONFIG["config"], "hf_token": "hf_s3cr3t"}}


def test_config_set_shows_the_nodes_refusal_and_exits_1(node: FakeNode) -> None:
    message = "invalid value for 'logging.level': Invalid enum value 'loud'"
    node.routes[("PUT", "/config")] = (
        422,
        {"error": {"message": message, "type": "invalid_request_error", "code": "invalid_config"}},
    )

    result = run("--api-url", node.url, "config", "set", "logging.level", "loud")

    assert result.exit_code == 1
    assert message in flat(result.stderr)
    assert result.stdout == ""


def test_config_set_refuses_a_key_inside_a_setting_as_usage_error(node: FakeNode) -> None:
    result = run("--api-url", node.url, "config", "set", "logging.level.colour", "red")

    assert result.exit_code == 2
    assert "'logging.level' is a setting" in flat(result.output)
    assert not [r for r in node.requests if r.method == "PUT"], "nothing was saved"


# --- errors and global options ------------------------------------------------------


@pytest.mark.parametrize("command", [("status",), ("models", "list"), ("config", "show")])
def test_no_node_answering_is_a_clear_error(closed_url: str, command: tuple[str, ...]) -> None:
    result = run("--api-url", closed_url, *command)

    assert result.exit_code == 1
    err = flat(result.stderr)
    assert f"No Skulk node answering at {closed_url}" in err
    assert "skulk serve" in err
    assert "Traceback" not in result.output


def test_error_envelope_message_is_shown(node: FakeNode) -> None:
    node.routes[("GET", "/v1/models")] = (
        503,
        {"error": {"message": "the model store is starting", "type": "unavailable", "code": 503}},
    )

    result = run("--api-url", node.url, "models", "list")

    assert result.exit_code == 1
    assert "the model store is starting" in flat(result.stderr)


def test_a_non_skulk_server_is_reported_not_crashed_on(node: FakeNode) -> None:
    node.routes[("GET", "/v1/models")] = (200, b"<html>hello</html>")

    result = run("--api-url", node.url, "models", "list")

    assert result.exit_code == 1
    assert "did not answer with a JSON object" in flat(result.stderr)


def test_api_url_comes_from_the_environment(node: FakeNode) -> None:
    result = run("models", "list", env={"SKULK_API_URL": node.url})

    assert result.exit_code == 0, result.output
    assert "gemma-3-270m-q4" in plain(result.stdout)


def test_a_malformed_api_url_is_a_usage_error() -> None:
    result = run("--api-url", "localhost:52415", "status")

    assert result.exit_code == 2
    assert "not an http(s) URL" in flat(result.output)


def test_an_unknown_command_is_a_usage_error() -> None:
    assert run("frobnicate").exit_code == 2


# --- serve --------------------------------------------------------------------------


def test_daemon_argv_passes_only_the_flags_given() -> None:
    assert serve.daemon_argv("/py", serve.NodeOptions()) == ["/py", "-m", "skulk_daemon"]
    options = serve.NodeOptions(
        host="0.0.0.0",
        api_port=52500,
        data_dir=Path("/var/lib/skulk"),
        models_dir=Path("/srv/models"),
        config_home=Path("/etc/skulk"),
    )
    assert serve.daemon_argv("/py", options) == [
        "/py",
        "-m",
        "skulk_daemon",
        "--host",
        "0.0.0.0",
        "--api-port",
        "52500",
        "--data-dir",
        "/var/lib/skulk",
        "--models-dir",
        "/srv/models",
        "--config-home",
        "/etc/skulk",
    ]
    assert serve.daemon_argv("/py", serve.NodeOptions(api_port=1)) == [
        "/py",
        "-m",
        "skulk_daemon",
        "--api-port",
        "1",
    ]


def test_daemon_argv_carries_the_fabric_flags() -> None:
    options = serve.NodeOptions(
        fabric_port=52600,
        peers=("10.0.0.2:52416", "10.0.0.3:52416"),
        force_master=True,
        no_mdns=True,
    )
    assert serve.daemon_argv("/py", options)[3:] == [
        "--fabric-port",
        "52600",
        "--peer",
        "10.0.0.2:52416",
        "--peer",
        "10.0.0.3:52416",
        "--force-master",
        "--no-mdns",
    ]


class Exec(Exception):
    pass


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record the os.execv the CLI would do; the test process is not replaced."""
    calls: list[list[str]] = []

    def fake_execv(path: str, argv: list[str]) -> None:
        calls.append([path, *argv[1:]])
        raise Exec

    monkeypatch.setattr(os, "execv", fake_execv)
    return calls


@pytest.mark.parametrize(
    ("args", "flags"),
    [
        (("serve",), []),
        ((), []),
        (
            ("serve", "--api-port", "52500", "--host", "::1"),
            ["--host", "::1", "--api-port", "52500"],
        ),
        (("serve", "--models-dir", "/srv/models"), ["--models-dir", "/srv/models"]),
        (("serve", "--log-level", "debug"), ["--log-level", "debug"]),
    ],
    ids=["serve", "bare-skulk", "port-and-host", "models-dir", "log-level"],
)
def test_serve_execs_the_daemon_with_the_given_flags(
    execs: list[list[str]], args: tuple[str, ...], flags: list[str]
) -> None:
    result = run(*args)

    assert isinstance(result.exception, Exec), result.output
    assert execs == [[sys.executable, "-m", "skulk_daemon", *flags]]


def test_serve_ignores_the_api_url_it_does_not_use(execs: list[list[str]]) -> None:
    result = run("serve", env={"SKULK_API_URL": "not a url"})

    assert isinstance(result.exception, Exec), result.output
    assert execs == [[sys.executable, "-m", "skulk_daemon"]]


def test_serve_refuses_a_bad_port_before_exec(execs: list[list[str]]) -> None:
    result = run("serve", "--api-port", "70000")

    assert result.exit_code == 2
    assert execs == []


def test_the_cli_does_not_import_the_daemon() -> None:
    code = (
        "import sys, skulk_cli.main, scripts.gen_cli_docs as _;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'skulk_daemon');"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
