"""``/api/openapi.json`` against a live daemon serving the demo model.

schemathesis sends generated requests, valid and not, to every operation of the live
document and checks each answer against it: the status is documented, the body is as
its schema says, the content type is declared, and the node never fails with a 500.
Generated requests almost never name the served model, so a fixed set of requests
that it answers (JSON, SSE and NDJSON) checks the success bodies as well.

Bounded: three fuzzed examples per operation plus the coverage phase's cases (not for
Ollama's alias paths, whose handlers are the canonical ones), no stateful phase, a
per-request timeout, generations of three tokens. A 5xx other than 500 passes only
where the document names it: it is then the node's designed answer (``503``
``not_gateway`` from the pairing routes of a node that is not the operator gateway, as
the spec says).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

import hypothesis
import jsonschema
import pytest
import schemathesis
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.transport.requests import ManagedCookiesSession

from tests.daemon.serving import DEMO, PROMPT, wait_idle
from tests.daemon_process import DaemonProcess

pytestmark = pytest.mark.slow

SKIPPED: Final = {
    "DELETE /instance/{instance_id}": "would delete the placed instance the other operations "
    "and suites share (a generated id cannot find it, but a mutated one is not worth the risk)",
    "PUT /config": "rewrites the shared daemon's skulk.yaml; a valid generated config can "
    "turn off what other operations (and suites) rely on",
    "POST /admin/restart": "restarts the shared daemon under the other operations",
    "POST /v1/tools/web_search": "searches the internet, which a test must not reach",
    "POST /v1/tools/open_url": "fetches arbitrary URLs from the internet",
    "POST /v1/tools/extract_page": "fetches arbitrary URLs from the internet",
    # Hugging Face routes ask the Hub (tests/hub runs them against a loopback fake hub).
    "GET /models/search": "asks Hugging Face, which a test must not reach",
    "GET /models/gguf-quants": "asks Hugging Face, which a test must not reach",
    "GET /models/card-summary": "asks Hugging Face, which a test must not reach",
    "POST /models/add": "asks Hugging Face, which a test must not reach",
    "POST /download/start": "would fetch a generated custom card's bytes from Hugging Face",
}
"""Operations left out, and why (their documentation is still walked by test_openapi_doc)."""

CHECKS: Final = [status_code_conformance, content_type_conformance, response_schema_conformance]

MAX_EXAMPLES: Final = 3
ALIASES: Final = "^/ollama/api/(api|v1)/"
"""Ollama's alias prefixes: the same handlers as ``/ollama/api/...``, so they get the
fuzzing phase only, not the (much longer) coverage phase again."""
REQUEST_TIMEOUT_SECONDS: Final = 20

CONFIG: Final = schemathesis.Config.from_dict(
    {
        "seed": 20261201,
        # Hypothesis' health checks judge generation, not the API: on a loaded machine, or
        # for a path parameter most strings cannot be, they would fail for neither.
        "suppress-health-check": ["too_slow", "filter_too_much"],
        "request-timeout": REQUEST_TIMEOUT_SECONDS,
        "generation": {"max-examples": MAX_EXAMPLES, "database": "none"},
        "phases": {
            "examples": {"enabled": False},
            "coverage": {"enabled": True},
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": False},
        },
        "operations": [
            {"include-path-regex": ALIASES, "phases": {"coverage": {"enabled": False}}},
        ],
    }
)


@pytest.fixture(scope="module")
def http() -> Iterator[ManagedCookiesSession]:
    """One session for every request the module sends: without one, schemathesis opened
    (and the node accepted) a new connection for each of its ~8,400 requests, and
    ``requests`` read the whole environment for proxies each time (about a third of
    the module's CPU). Cookies are still dropped between requests, and redirects are
    followed only within the host, as schemathesis' own sessions do; no proxy applies."""
    with ManagedCookiesSession() as session:
        session.trust_env = False
        yield session


@pytest.fixture(scope="module")
def live_schema(demo_served: tuple[DaemonProcess, str]) -> schemathesis.BaseSchema:
    daemon, _ = demo_served
    return schemathesis.openapi.from_url(f"{daemon.url}/api/openapi.json", config=CONFIG)


@pytest.fixture(autouse=True)
def _pytest_9_node_id(request: pytest.FixtureRequest) -> None:
    # NOTE: schemathesis' lazy parametrization (4.32) reads and renames the test's
    # ``Node._nodeid``, which pytest 9.2 no longer has; the attribute it wants is put
    # back for it (it only labels the per-operation subtests).
    request.node._nodeid = request.node.nodeid


schema = schemathesis.pytest.from_fixture("live_schema").exclude(
    func=lambda ctx: f"{ctx.operation.method.upper()} {ctx.operation.path}" in SKIPPED
)


@schema.parametrize()
@hypothesis.settings(deadline=None)
def test_the_api_answers_as_documented(
    case: schemathesis.Case, http: ManagedCookiesSession
) -> None:
    response = case.call(session=http)
    case.validate_response(response, checks=CHECKS)
    assert response.status_code != 500, response.text


FEW: Final = 3
"""Tokens per generation: enough for content, few enough to stay cheap."""
CHAT: Final = {"messages": PROMPT, "max_tokens": FEW}
OLLAMA: Final = {"messages": PROMPT, "options": {"num_predict": FEW}}
RESPONSES: Final = {"input": "Count: one, two,", "max_output_tokens": FEW}
SERVED: Final = {
    "chat json": ("/v1/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 2}),
    "chat sse": (
        "/v1/chat/completions",
        {**CHAT, "stream": True, "stream_options": {"include_usage": True}},
    ),
    "bench json": ("/bench/chat/completions", CHAT),
    "completions json": (
        "/v1/completions",
        {"prompt": ["Count:", "2 + 2 ="], "n": 2, "max_tokens": FEW, "logprobs": 2},
    ),
    "completions sse": (
        "/v1/completions",
        {
            "prompt": "Count:",
            "max_tokens": FEW,
            "echo": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
    "messages json": ("/v1/messages", CHAT),
    "messages sse": ("/v1/messages", {**CHAT, "stream": True}),
    "responses json": ("/v1/responses", RESPONSES),
    "responses sse": ("/v1/responses", {**RESPONSES, "stream": True}),
    "ollama chat ndjson": ("/ollama/api/chat", OLLAMA),
    "ollama generate ndjson": (
        "/ollama/api/generate",
        {"prompt": "Count:", "options": {"num_predict": FEW}},
    ),
    "ollama load probe": ("/ollama/api/generate", {}),
    "ollama show": ("/ollama/api/show", {}),
}
"""Requests the demo model answers with 200: generated requests almost never name it,
so these make sure the success bodies (JSON, SSE events, NDJSON lines) are checked."""


@pytest.mark.parametrize("name", SERVED)
def test_served_answers_match_the_document(
    live_schema: schemathesis.BaseSchema,
    demo_served: tuple[DaemonProcess, str],
    http: ManagedCookiesSession,
    name: str,
) -> None:
    daemon, instance_id = demo_served
    path, fields = SERVED[name]
    case = live_schema[path]["POST"].Case(body={"model": DEMO, **fields})
    response = case.call(session=http)
    try:
        assert response.status_code == 200, response.text
        case.validate_response(response, checks=CHECKS)
        if response.headers["content-type"][0].startswith("application/x-ndjson"):
            _check_lines(live_schema.raw_schema, path, response.text)
    finally:
        wait_idle(daemon, instance_id)


def test_an_instance_is_described_as_rendered(
    live_schema: schemathesis.BaseSchema,
    demo_served: tuple[DaemonProcess, str],
    http: ManagedCookiesSession,
) -> None:
    _, instance_id = demo_served
    for case in (
        live_schema["/instance/{instance_id}"]["GET"].Case(
            path_parameters={"instance_id": instance_id}
        ),
        live_schema["/instance/placement"]["GET"].Case(query={"model_id": DEMO}),
        live_schema["/instance/previews"]["GET"].Case(query={"model_id": DEMO}),
    ):
        response = case.call(session=http)
        assert response.status_code == 200, response.text
        case.validate_response(response, checks=CHECKS)


def _check_lines(document: dict[str, Any], path: str, text: str) -> None:
    """Every NDJSON line against the document's ``x-item-schema`` (schemathesis reads
    no item schema for NDJSON in a 3.1 document)."""
    media = document["paths"][path]["post"]["responses"]["200"]["content"]
    item = media["application/x-ndjson"]["x-item-schema"]
    validator = jsonschema.Draft202012Validator({**item, "components": document["components"]})
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert lines
    for line in lines:
        validator.validate(line)
