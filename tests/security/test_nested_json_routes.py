"""Every route that takes a body refuses JSON nested past the decoder's recursion limit
with a 4xx in its own envelope, never a 500 (issue #36, finding 10).

``test_nested_json`` drives the surfaces the finding named against a real daemon; this
module walks the whole route table of the real app in process (``tests/api/in_process.py``),
so a route added later without the shared handler is caught. Each mutating route gets two
bodies small enough for every route's size bound (so the depth, not the size, is what is
refused): a bare nested array, and a nested value inside an object field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.handlers import HTTPRouteHandler

from tests.api.in_process import AppNode
from tests.security.test_route_table import _routes

DEPTH = 1_500
"""Past msgspec's recursion limit (1,000 levels) and 3 KB in all, under the smallest
route body bound (4 KiB)."""
BARE = b"[" * DEPTH + b"]" * DEPTH
IN_A_FIELD = b'{"input": ' + BARE + b"}"

BODILESS_ACTIONS = {("POST", "/admin/restart"), ("POST", "/onboarding")}
"""Routes that take no body and act when called: driving them here would restart the node
or complete its onboarding, and no body reaches a decoder there."""


def _mutating_routes() -> list[tuple[str, str]]:
    return sorted(
        key
        for key, handler in _routes().items()
        if isinstance(handler, HTTPRouteHandler)
        and key[0] not in ("GET", "HEAD", "OPTIONS")
        and key not in BODILESS_ACTIONS
    )


ROUTES = _mutating_routes()


def concrete(path: str) -> str:
    """The route's path with each parameter filled by a well-formed value, so a route
    that checks its ids before its body still reaches the body."""
    path = re.sub(r"\{operation_id:[^}]*\}", "0" * 32, path)
    path = path.replace("{plugin_id:str}", "managed.probe")
    return re.sub(r"\{[^}]*\}", "probe", path)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path) -> Iterator[AppNode]:
    with AppNode(
        root=tmp_path_factory.mktemp("nested-routes"), models_dir=shared_models_dir
    ) as node:
        yield node


def test_the_walk_covers_the_route_table() -> None:
    assert len(ROUTES) > 80
    for named in (("PUT", "/config"), ("POST", "/v1/responses"), ("POST", "/v1/messages")):
        assert named in ROUTES


@pytest.mark.parametrize("body", [BARE, IN_A_FIELD], ids=["bare", "in-a-field"])
def test_every_route_refuses_deep_nesting_in_its_envelope(app: AppNode, body: bytes) -> None:
    assert len(body) < 4096
    failures: list[str] = []
    for method, route in ROUTES:
        path = concrete(route)
        answer = app.http.request(
            method,
            path,
            content=body,
            # The dashboard's header, so the pairing routes reach their bodies too.
            headers={"Content-Type": "application/json", "X-Skulk-Dashboard": "pairing-v1"},
        )
        problem = _problem(route, answer.status_code, answer.content)
        if problem:
            failures.append(f"{method} {route}: {problem}")
    assert failures == []
    assert app.get("/node_id").status_code == 200


def _problem(route: str, status: int, content: bytes) -> str | None:
    """What is wrong with one answer, or ``None``: a 4xx (or the 503 of a node without a
    store) whose body is the route's error envelope."""
    if not (400 <= status < 500 or (status == 503 and route.startswith("/store/"))):
        return f"status {status}: {content[:200]!r}"
    try:
        error = json.loads(content)
    except ValueError:
        return f"status {status} without a JSON body: {content[:200]!r}"
    if route.startswith("/ollama/"):
        ok = isinstance(error.get("error"), str) and error["error"]
    elif route == "/v1/messages":
        ok = error.get("type") == "error" and bool(error["error"]["message"])
    else:
        ok = isinstance(error.get("error"), dict) and bool(error["error"].get("message"))
    return None if ok else f"status {status} outside the envelope: {content[:200]!r}"
