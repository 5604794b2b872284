"""A stand-in Skulk node for the CLI rendering tests.

A real HTTP server on a loopback socket that answers the CLI's routes with canned
JSON in the daemon's exact wire shapes and records what it was sent. (The CLI is
also tested end to end against a real daemon elsewhere.)
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GIB = 1024**3
THIS_NODE = "node-a1"
PEER_NODE = "node-b2"

IDENTITY: dict[str, Any] = {"nodeId": THIS_NODE, "hostname": "alpha", "ipAddress": "192.168.1.10"}

STATE: dict[str, Any] = {
    "instances": {
        "inst-1": {
            "MlxRingInstance": {
                "instanceId": "inst-1",
                "shardAssignments": {
                    "modelId": "gemma-3-270m-q4",
                    "nodeToRunner": {THIS_NODE: "runner-1", PEER_NODE: "runner-2"},
                    "runnerToShard": {
                        "runner-1": {
                            "PipelineShardMetadata": {
                                "modelId": "gemma-3-270m-q4",
                                "deviceRank": 0,
                                "worldSize": 2,
                                "startLayer": 0,
                                "endLayer": 9,
                                "nLayers": 18,
                            }
                        },
                        "runner-2": {
                            "PipelineShardMetadata": {
                                "modelId": "gemma-3-270m-q4",
                                "deviceRank": 1,
                                "worldSize": 2,
                                "startLayer": 9,
                                "endLayer": 18,
                                "nLayers": 18,
                            }
                        },
                    },
                },
                "contextTokenLimit": 32768,
            }
        }
    },
    "runners": {
        "runner-1": {"RunnerReady": {}},
        "runner-2": {"RunnerFailed": {"errorMessage": "out of memory"}},
    },
    "tasks": {},
    "nodeMemory": {
        THIS_NODE: {"ramTotal": {"inBytes": 16 * GIB}, "ramAvailable": {"inBytes": 6 * GIB}},
        PEER_NODE: {"ramTotal": {"inBytes": 64 * GIB}, "ramAvailable": {"inBytes": 48 * GIB}},
    },
    "nodeHealth": {
        THIS_NODE: {"level": "ok", "reasons": []},
        PEER_NODE: {
            "level": "warn",
            "reasons": [
                {
                    "code": "disk_low",
                    "message": "models volume is 95% full",
                    "remediation": "free space under SKULK_MODELS_DIR",
                }
            ],
        },
    },
    "nodeIdentities": {
        THIS_NODE: {
            "friendlyName": "alpha",
            "nodeInstallId": "6f1c2d9e-0000-4000-8000-000000000001",
            "skulkVersion": "0.1.0",
            "skulkCommit": None,
        },
        PEER_NODE: {
            "friendlyName": "bravo",
            "nodeInstallId": "6f1c2d9e-0000-4000-8000-000000000002",
            "skulkVersion": "0.1.0",
            "skulkCommit": None,
        },
    },
}

MODELS: dict[str, Any] = {
    "object": "list",
    "data": [
        {
            "id": "qwen3-8b-q4",
            "object": "model",
            "catalog_source": "registry",
            "installed": False,
            "capabilities": ["text", "thinking"],
            "tags": ["thinking"],
            "context_length": 40960,
            "storage_size_bytes": 5 * GIB,
        },
        {
            "id": "gemma-3-270m-q4",
            "object": "model",
            "catalog_source": "installed",
            "installed": True,
            "capabilities": ["text"],
            "tags": [],
            "context_length": 32768,
            "storage_size_bytes": 253 * 1024**2,
        },
    ],
}

CONFIG: dict[str, Any] = {
    "config": {
        "logging": {"level": "info", "event_log": True},
        "experiments": {"tts_streaming": None, "stt_realtime": None, "speech_translation": None},
        "model_trust": {"approved_remote_code_identities": []},
        "inference": {"kv_cache_backend": "default", "max_output_tokens": None},
        "model_store": {
            "models_dir": None,
            "staging": {"staging_keep_recent_gb": 40.0, "cleanup_on_deactivate": True},
        },
        "node": {"friendly_name": "alpha", "participation": "full"},
        "cluster": {"peers": [], "fabric_port": 52416},
        "telemetry": {"enabled": False},
    },
    "path": "/home/op/.config/skulk/skulk.yaml",
    "effective": {
        "kv_cache_backend": "default",
        "has_hf_token": False,
        "experimental_mode_enabled": False,
    },
}


@dataclass
class Recorded:
    method: str
    path: str
    body: object


@dataclass
class FakeNode:
    """Routes are ``(method, path) -> (status, JSON body)``; tests may replace them."""

    url: str = ""
    routes: dict[tuple[str, str], tuple[int, object]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)

    def answer(self, method: str, path: str, body: object) -> tuple[int, object]:
        self.requests.append(Recorded(method, path, body))
        if (method, path) in self.routes:
            return self.routes[(method, path)]
        if method == "PUT" and path == "/config" and isinstance(body, dict):
            # Like the daemon: answer with the saved configuration.
            return 200, {**CONFIG, "config": body.get("config")}
        return 404, {"error": {"message": f"no route {path}", "type": "not_found", "code": 404}}


def _handler(node: FakeNode) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            status, body = node.answer(self.command, self.path, json.loads(raw) if raw else None)
            payload = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = _serve  # noqa: N815 - http.server's naming

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def start(fake: FakeNode) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Serve ``fake`` on a free loopback port; sets ``fake.url``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    host, port = server.server_address[:2]
    fake.url = f"http://{host!s}:{port}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    return server, thread
