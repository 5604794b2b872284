"""A stand-in Skulk node for the CLI rendering tests.

A real HTTP server on a loopback socket that answers the CLI's routes with canned
JSON in the daemon's exact wire shapes and records what it was sent. (The CLI is
also tested end to end against a real daemon elsewhere.)
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

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


# --- placement ----------------------------------------------------------------------

MODEL = "gemma-3-270m-q4"


def pipeline_instance(
    instance_id: str, nodes: tuple[str, ...] = (THIS_NODE, PEER_NODE), context: int = 32768
) -> dict[str, Any]:
    """A tagged MlxRing instance splitting 18 layers evenly over ``nodes``, like /state."""
    per = 18 // len(nodes)
    runners = {node: f"{instance_id}-runner-{rank}" for rank, node in enumerate(nodes)}
    return {
        "MlxRingInstance": {
            "instanceId": instance_id,
            "shardAssignments": {
                "modelId": MODEL,
                "nodeToRunner": runners,
                "runnerToShard": {
                    runners[node]: {
                        "PipelineShardMetadata": {
                            "modelId": MODEL,
                            "deviceRank": rank,
                            "worldSize": len(nodes),
                            "startLayer": rank * per,
                            "endLayer": 18 if rank == len(nodes) - 1 else (rank + 1) * per,
                            "nLayers": 18,
                        }
                    }
                    for rank, node in enumerate(nodes)
                },
            },
            "contextTokenLimit": context,
        }
    }


def _preview(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model_id": MODEL,
        "sharding": "Pipeline",
        "instance_meta": "MlxRing",
        "instance": None,
        "error": None,
        "error_code": None,
        "memory_delta_by_node": {},
        "max_context_tokens": None,
        "default_context_tokens": None,
        "reserves_context_at_load": False,
        "kv_bytes_per_token": None,
        "card_digest": None,
        "alternative": False,
        "node_count": 1,
        "node_ids": [],
        "backend": None,
    }
    return {**base, **fields}


PREVIEWS: dict[str, Any] = {
    "previews": [
        _preview(
            node_count=2,
            node_ids=[THIS_NODE, PEER_NODE],
            backend="mlx",
            instance=pipeline_instance("preview-1"),
            memory_delta_by_node={THIS_NODE: 300 * 1024**2, PEER_NODE: 280 * 1024**2},
            max_context_tokens=32768,
            default_context_tokens=8192,
            reserves_context_at_load=True,
            kv_bytes_per_token=36864,
            card_digest="sha256:0f0f",
        ),
        _preview(
            node_ids=[PEER_NODE],
            backend="mlx",
            instance=pipeline_instance("preview-2", nodes=(PEER_NODE,)),
            memory_delta_by_node={PEER_NODE: 560 * 1024**2},
            max_context_tokens=32768,
            default_context_tokens=32768,
            kv_bytes_per_token=36864,
            card_digest="sha256:0f0f",
            alternative=True,
        ),
        _preview(
            sharding="Tensor",
            node_count=2,
            error="gemma-3-270m-q4 does not support Tensor sharding",
            error_code="no_valid_placement",
        ),
    ]
}

PLACED_ID = "inst-2"
PLACE_RESPONSE: dict[str, Any] = {
    "message": "Command received.",
    "command_id": PLACED_ID,
    "instance_id": PLACED_ID,
    "model_id": MODEL,
}
INSTANCE_DETAIL: dict[str, Any] = {
    "instance": STATE["instances"]["inst-1"],
    "runners": STATE["runners"],
}
DELETE_RESPONSE: dict[str, Any] = {
    "message": "Command received.",
    "command_id": "cmd-delete-1",
    "instance_id": "inst-1",
}


def state_with(
    instance_id: str,
    runner_status: dict[str, Any] | None,
    *,
    failure: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """STATE plus ``instance_id`` (two runners, both in ``runner_status``), or its failure.

    ``runner_status`` None leaves the instance out, as when it vanished.
    """
    state = copy.deepcopy(STATE)
    if runner_status is not None:
        # Stamped with the previews' default window, as the node would.
        instance = pipeline_instance(instance_id, context=8192)
        state["instances"][instance_id] = instance
        for runner in instance["MlxRingInstance"]["shardAssignments"]["nodeToRunner"].values():
            state["runners"][runner] = copy.deepcopy(runner_status)
    if failure is not None:
        state["instanceFailures"] = [failure]
    return state


# --- chat ---------------------------------------------------------------------------

CHAT_COMMAND_ID = "cmd-chat-1"
CHAT_WORDS = ("Once", " upon", " a", " time")


def sse(data: object) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
    return sse(
        {
            "id": CHAT_COMMAND_ID,
            "object": "chat.completion.chunk",
            "created": 1787328699,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            "usage": None,
        }
    )


def token_frames(words: Iterable[str] = CHAT_WORDS) -> list[bytes]:
    frames = []
    for index, word in enumerate(words):
        delta = {"role": "assistant", "content": word} if index == 0 else {"content": word}
        frames.append(chunk(delta))
    return frames


def chat_stream(words: Iterable[str] = CHAT_WORDS) -> list[bytes]:
    """A whole streamed reply, frame for frame as the daemon writes it."""
    stats = {
        "prompt_tps": 310.5,
        "generation_tps": 48.25,
        "prompt_tokens": 7,
        "generation_tokens": 4,
        "serving_batches": False,
        "in_flight_at_admission": 1,
    }
    return [
        f": command_id {CHAT_COMMAND_ID}\n\n".encode(),
        *token_frames(words),
        chunk({}, finish_reason="stop"),
        b": generation_stats " + json.dumps(stats).encode() + b"\n\n",
        b"data: [DONE]\n\n",
    ]


CONTEXT_ERROR = {
    "error": {
        "message": "context_length_exceeded: the prompt and max_tokens need 40000 tokens",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
}


def failing_chat_stream() -> list[bytes]:
    """A reply that starts, then fails: the error frame, then the sentinel."""
    return [
        f": command_id {CHAT_COMMAND_ID}\n\n".encode(),
        *token_frames(CHAT_WORDS[:1]),
        sse(CONTEXT_ERROR),
        b"data: [DONE]\n\n",
    ]


COMPLETION: dict[str, Any] = {
    "id": CHAT_COMMAND_ID,
    "object": "chat.completion",
    "created": 1787328699,
    "model": MODEL,
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Once upon a time"},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ],
    "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11},
}


# --- Claude Messages and Ollama chat -------------------------------------------------

CONTEXT_MESSAGE = CONTEXT_ERROR["error"]["message"]


def claude_event(data: dict[str, Any]) -> bytes:
    """One named SSE event, as the daemon writes Anthropic's events."""
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def _claude_start() -> bytes:
    message = {
        "id": f"msg_{CHAT_COMMAND_ID}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        # Streaming, the prompt's size is known only at the end (message_delta).
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    return claude_event({"type": "message_start", "message": message})


def _claude_block(index: int, kind: str, texts: Iterable[str]) -> list[bytes]:
    start = {"type": "text", "text": ""} if kind == "text" else {"type": kind, kind: ""}
    frames = [claude_event({"type": "content_block_start", "index": index, "content_block": start})]
    for text in texts:
        delta = {"type": f"{kind}_delta", kind: text}
        frames.append(claude_event({"type": "content_block_delta", "index": index, "delta": delta}))
    frames.append(claude_event({"type": "content_block_stop", "index": index}))
    return frames


def claude_stream(
    words: Iterable[str] = CHAT_WORDS, thinking: Iterable[str] = (), stop_reason: str = "end_turn"
) -> list[bytes]:
    """A whole streamed Claude Messages reply, event for event as the daemon writes it."""
    thoughts = list(thinking)
    blocks = _claude_block(0, "thinking", thoughts) if thoughts else []
    return [
        _claude_start(),
        claude_event({"type": "ping"}),
        *blocks,
        *_claude_block(1 if thoughts else 0, "text", words),
        claude_event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"input_tokens": 7, "output_tokens": 4},
            }
        ),
        claude_event({"type": "message_stop"}),
    ]


def claude_error(message: str, type_: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}


def failing_claude_stream() -> list[bytes]:
    """A Claude reply that starts, then fails: an ``error`` event ends it."""
    return [
        _claude_start(),
        *_claude_block(0, "text", CHAT_WORDS[:1])[:-1],
        claude_event(claude_error(CONTEXT_MESSAGE)),
    ]


CLAUDE_MESSAGE: dict[str, Any] = {
    "id": f"msg_{CHAT_COMMAND_ID}",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [{"type": "text", "text": "Once upon a time"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 7, "output_tokens": 4},
}


def ndjson(data: object) -> bytes:
    return json.dumps(data).encode() + b"\n"


def _ollama_line(content: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "created_at": "2026-11-30T05:17:48.114359Z",
        "message": {"role": "assistant", "content": content},
        "done": False,
        **fields,
    }


OLLAMA_DONE = _ollama_line(
    "",
    done=True,
    done_reason="stop",
    total_duration=120_000_000,
    load_duration=0,
    prompt_eval_duration=20_000_000,  # 7 tokens: 350/s
    eval_duration=80_000_000,  # 4 tokens: 50/s
    prompt_eval_count=7,
    eval_count=4,
)


def ollama_stream(words: Iterable[str] = CHAT_WORDS) -> list[bytes]:
    """A whole streamed Ollama chat reply, line for line as the daemon writes it.

    The daemon's keep-alive is a lone space, which prefixes the next line.
    """
    lines = [ndjson(_ollama_line(word)) for word in words]
    return [b" ", *lines[:1], b" ", *lines[1:], ndjson(OLLAMA_DONE)]


def failing_ollama_stream() -> list[bytes]:
    """An Ollama reply that starts, then fails: an ``{"error": ...}`` line ends it."""
    return [ndjson(_ollama_line(CHAT_WORDS[0])), ndjson({"error": CONTEXT_MESSAGE})]


OLLAMA_CHAT: dict[str, Any] = {
    **OLLAMA_DONE,
    "message": {"role": "assistant", "content": "Once upon a time"},
}


def ndjson_reply(lines: Iterable[bytes]) -> Reply:
    return Reply(
        200,
        headers={"X-Skulk-Command-Id": CHAT_COMMAND_ID},
        stream=lines,
        content_type="application/x-ndjson",
    )


# --- bench --------------------------------------------------------------------------

BENCH_STATS: dict[str, Any] = {
    "prompt_tps": 310.5,
    "generation_tps": 48.25,
    "prompt_tokens": 7,
    "generation_tokens": 4,
    "serving_batches": False,
    "in_flight_at_admission": 1,
    "time_to_first_token_ms": 22.6,
}
BENCH_POWER: dict[str, Any] = {
    "nodes": {THIS_NODE: {"watts": 41.5, "sources": ["nvidia-smi", "rapl:package-0"]}},
    "total_watts": 41.5,
}


def bench_response(
    stats: dict[str, Any] | None = None, power: dict[str, Any] | None = BENCH_POWER
) -> dict[str, Any]:
    """``/bench/chat/completions``: the completion, what the runner measured, and power
    (None where the node cannot measure it)."""
    return {
        **COMPLETION,
        "choices": [{**COMPLETION["choices"][0], "finish_reason": "length"}],
        "system_fingerprint": None,
        "generation_stats": {**BENCH_STATS, **(stats or {})},
        "power_usage": power,
    }


# --- the server ---------------------------------------------------------------------


@dataclass
class Recorded:
    method: str
    path: str
    body: object
    query: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Reply:
    """An answer: JSON (or raw bytes) in one piece, or ``stream`` frames flushed one by one
    (as ``content_type``: SSE, or NDJSON for Ollama)."""

    status: int = 200
    body: object = None
    headers: dict[str, str] = field(default_factory=dict)
    stream: Iterable[bytes] | None = None
    content_type: str = "text/event-stream"


Answer = tuple[int, object] | Reply
Route = Answer | Callable[[Recorded], Answer]


@dataclass
class FakeNode:
    """Routes are ``(method, path) -> answer``, or a function of the request that gives
    one; tests may replace them. Every request is recorded, in order."""

    url: str = ""
    routes: dict[tuple[str, str], Route] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)

    def answer(self, request: Recorded) -> Reply:
        self.requests.append(request)
        route = self.routes.get((request.method, request.path))
        if callable(route):
            route = route(request)
        if isinstance(route, Reply):
            return route
        if route is not None:
            return Reply(*route)
        if request.method == "PUT" and request.path == "/config" and isinstance(request.body, dict):
            # Like the daemon: answer with the saved configuration.
            return Reply(200, {**CONFIG, "config": request.body.get("config")})
        message = f"no route {request.path}"
        return Reply(404, {"error": {"message": message, "type": "not_found", "code": 404}})

    def sent(self, method: str, path: str) -> list[Recorded]:
        return [r for r in self.requests if (r.method, r.path) == (method, path)]


def sse_reply(frames: Iterable[bytes]) -> Reply:
    return Reply(200, headers={"X-Skulk-Command-Id": CHAT_COMMAND_ID}, stream=frames)


def _handler(node: FakeNode) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            url = urlsplit(self.path)
            reply = node.answer(
                Recorded(
                    self.command, url.path, json.loads(raw) if raw else None, parse_qs(url.query)
                )
            )
            if reply.stream is not None:
                self._stream(reply, iter(reply.stream))
                return
            body = reply.body
            payload = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def _stream(self, reply: Reply, frames: Iterator[bytes]) -> None:
            # HTTP/1.0 with no length: the body ends when the connection closes.
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Cache-Control", "no-cache")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            try:
                for frame in frames:
                    self.wfile.write(frame)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client hung up, as it may
            self.close_connection = True

        do_GET = do_PUT = do_POST = do_DELETE = _serve  # noqa: N815 - http.server's naming

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
