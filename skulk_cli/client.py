"""The one HTTP client the CLI uses to talk to a Skulk node.

Every method returns the node's parsed JSON object unchanged (``--json`` prints it
as is) and turns every way a request can fail into one of three exceptions, so
commands never see an httpx error. A streamed reply is read through
:class:`ReplyStream`, which yields its body's lines; ``wire_formats`` reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import IO, TYPE_CHECKING, Self
from urllib.parse import quote

if TYPE_CHECKING:
    import ssl
    from contextlib import AbstractContextManager

    import httpx

DEFAULT_API_URL = "http://localhost:52415"
# Control-plane reads answer from memory; a node that takes longer is wedged or gone.
DEFAULT_TIMEOUT_SECONDS = 10.0
STORE_TIMEOUT_SECONDS = 60.0
# Placement (and its preview) waits up to 15 s on the node for freshly gossiped
# cluster info before answering 503, so it gets more than that.
PLACEMENT_TIMEOUT_SECONDS = 30.0
# A generation may wait on a model load or a long prompt before its first byte;
# the node sends keep-alives meanwhile, and the user can always press Ctrl-C.
GENERATION_READ_TIMEOUT_SECONDS: float | None = None
# Hub calls (search, add, a download's start) wait on Hugging Face itself.
HUB_TIMEOUT_SECONDS = 120.0
PLACEMENT_FAILURE_HEADER = "X-Skulk-Placement-Failure"
COMMAND_ID_HEADER = "X-Skulk-Command-Id"

JsonObject = dict[str, object]


class SkulkApiError(Exception):
    """The node answered, and refused: an HTTP error status."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        placement_failure: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        # The stable category of a refused placement (no_valid_placement, ...).
        self.placement_failure = placement_failure


class SkulkUnreachable(Exception):
    """Nothing answered at the API URL (refused, unresolvable, timed out, reset)."""

    def __init__(self, base_url: str, reason: str) -> None:
        super().__init__(f"{base_url}: {reason}")
        self.base_url = base_url
        self.reason = reason


class UnexpectedResponseError(Exception):
    """Something answered, but not in the shape a Skulk node answers in."""


class SkulkClient:
    """A typed client for the routes the CLI uses. Use it as a context manager."""

    def __init__(
        self,
        base_url: str,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        *,
        verify: ssl.SSLContext | bool = True,
        auth: httpx.Auth | None = None,
    ) -> None:
        """``verify`` and ``auth`` carry an operator pairing (``skulk --operator``): the
        TLS context pinned to the gateway's certificate and the bearer that refreshes
        itself. A direct client leaves both at their defaults."""
        # NOTE: httpx is imported on first use, not with the CLI: it costs about half
        # a second, which every shell completion and `--help` would otherwise pay.
        import httpx  # noqa: PLC0415

        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, verify=verify, auth=auth)
        # The plugin routes take direct owner authority from this marker (the
        # dashboard's); a paired client's bearer is its authority instead.
        self._owner_headers = {"X-Skulk-Dashboard": "pairing-v1"} if auth is None else {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def node_identity(self) -> JsonObject:
        """``GET /node/identity``: ``nodeId``, ``hostname``, ``ipAddress``."""
        return self._request("GET", "/node/identity")

    def state(self) -> JsonObject:
        """``GET /state``: the cluster state with telemetry and derived health."""
        return self._request("GET", "/state")

    def models(self) -> JsonObject:
        """``GET /v1/models``: the catalog, installed or not."""
        return self._request("GET", "/v1/models")

    def registry_status(self) -> JsonObject:
        """``GET /v1/registry/status``: the signed registry's source and freshness."""
        return self._request("GET", "/v1/registry/status")

    def search_models(self, params: tuple[tuple[str, str], ...]) -> list[object]:
        """``GET /models/search``: Hugging Face results with discovery metadata (a list)."""
        found = self._request(
            "GET", "/models/search", params=params, timeout=HUB_TIMEOUT_SECONDS, listing=True
        )
        results = found.get("results")
        return results if isinstance(results, list) else []

    def add_model(self, body: JsonObject) -> JsonObject:
        """``POST /models/add``: the catalog item, once the pinned card is visible."""
        return self._request("POST", "/models/add", body=body, timeout=HUB_TIMEOUT_SECONDS)

    def import_model(self, body: JsonObject) -> JsonObject:
        """``POST /models/import``: a local GGUF hard-linked, hashed and catalogued."""
        return self._request("POST", "/models/import", body=body, timeout=HUB_TIMEOUT_SECONDS)

    def remove_custom_card(self, model_id: str) -> JsonObject:
        """``DELETE /models/custom/{model_id}`` (the id travels raw, slash included)."""
        return self._request("DELETE", f"/models/custom/{quote(model_id, safe='/')}")

    def start_download(self, node_id: str, model_id: str) -> JsonObject:
        """``POST /download/start``: the node's download status for the model."""
        body: JsonObject = {"target_node_id": node_id, "model_id": model_id}
        return self._request("POST", "/download/start", body=body, timeout=HUB_TIMEOUT_SECONDS)

    def cancel_download(self, node_id: str, model_id: str) -> JsonObject:
        """``DELETE /download/{node_id}/{model_id}``: cancel (partials kept) or delete."""
        path = f"/download/{quote(node_id, safe='')}/{quote(model_id, safe='/')}"
        return self._request("DELETE", path, timeout=HUB_TIMEOUT_SECONDS)

    def config(self) -> JsonObject:
        """``GET /config``: ``config`` (secrets stripped), ``path`` and ``effective``."""
        return self._request("GET", "/config")

    def diagnostics(self, node_id: str | None = None) -> JsonObject:
        """``GET /v1/diagnostics/node``, or another member's through ``/cluster/{id}``."""
        path = "/v1/diagnostics/node" if node_id is None else f"/v1/diagnostics/cluster/{node_id}"
        return self._request("GET", path)

    def restart(
        self,
        *,
        node_install_id: str | None = None,
        node_id: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> JsonObject:
        """``POST /admin/restart``: restart a node in place (the API node with no target)."""
        params = tuple(
            (name, value)
            for name, value in (("node_install_id", node_install_id), ("node_id", node_id))
            if value is not None
        )
        return self._request("POST", "/admin/restart", params=params or None, timeout=timeout)

    def cluster_diagnostics(self) -> JsonObject:
        """``GET /v1/diagnostics/cluster``: every member, unreachable ones ``ok: false``."""
        return self._request("GET", "/v1/diagnostics/cluster")

    def cluster_timeline(self) -> JsonObject:
        """``GET /v1/diagnostics/cluster/timeline``: every rank's recorder, merged."""
        return self._request("GET", "/v1/diagnostics/cluster/timeline")

    def capture(self, body: JsonObject, node_id: str | None = None) -> JsonObject:
        """``POST .../capture`` on this node or another member."""
        path = (
            "/v1/diagnostics/node/capture"
            if node_id is None
            else f"/v1/diagnostics/cluster/{node_id}/capture"
        )
        return self._request("POST", path, body=body, timeout=30.0)

    def set_tracing(self, enabled: bool) -> JsonObject:
        """``PUT /v1/tracing``: trace new requests cluster-wide (or stop)."""
        return self._request("PUT", "/v1/tracing", body={"enabled": enabled})

    def traces(self) -> JsonObject:
        """``GET /v1/traces/cluster``: every member's trace records, by task."""
        return self._request("GET", "/v1/traces/cluster")

    def trace(self, task_id: str, view: str = "") -> JsonObject:
        """``GET /v1/traces/cluster/{id}[/stats|/raw]``: one task across the cluster."""
        suffix = f"/{view}" if view else ""
        return self._request("GET", f"/v1/traces/cluster/{task_id}{suffix}")

    def put_config(self, document: JsonObject) -> JsonObject:
        """``PUT /config`` with the full desired document; 422 when it is invalid."""
        return self._request("PUT", "/config", body={"config": document})

    def instance_previews(
        self,
        model_id: str,
        *,
        excluded_nodes: Sequence[str] = (),
        sharding: str | None = None,
        instance_meta: str | None = None,
        min_nodes: int | None = None,
        context_tokens: int | None = None,
    ) -> JsonObject:
        """``GET /instance/previews``: every placement shape, valid or with its refusal.

        Options left ``None`` are not sent: the node previews every value.
        """
        params = [("model_id", model_id), *(("excluded_node_ids", n) for n in excluded_nodes)]
        optional = (
            ("sharding", sharding),
            ("instance_meta", instance_meta),
            ("min_nodes", min_nodes),
            ("context_tokens", context_tokens),
        )
        params += [(name, str(value)) for name, value in optional if value is not None]
        return self._request(
            "GET", "/instance/previews", params=tuple(params), timeout=PLACEMENT_TIMEOUT_SECONDS
        )

    def place_instance(
        self,
        model_id: str,
        *,
        sharding: str,
        instance_meta: str,
        min_nodes: int,
        excluded_nodes: Sequence[str] = (),
        context_tokens: int | None = None,
    ) -> JsonObject:
        """``POST /place_instance``: ``command_id`` and ``instance_id`` once accepted.

        A refusal is a :class:`SkulkApiError` whose ``placement_failure`` carries the
        node's category (``no_valid_placement``, ``placement_info_pending``).
        """
        body: JsonObject = {
            "model_id": model_id,
            "sharding": sharding,
            "instance_meta": instance_meta,
            "min_nodes": min_nodes,
            "excluded_nodes": list(excluded_nodes),
        }
        if context_tokens is not None:
            body["context_tokens"] = context_tokens
        return self._request(
            "POST", "/place_instance", body=body, timeout=PLACEMENT_TIMEOUT_SECONDS
        )

    def instance(self, instance_id: str) -> JsonObject:
        """``GET /instance/{id}``: ``instance`` (tagged) and its ``runners``; 404 if none."""
        return self._request("GET", f"/instance/{quote(instance_id, safe='')}")

    def delete_instance(self, instance_id: str) -> JsonObject:
        """``DELETE /instance/{id}``: ``message``, ``command_id``, ``instance_id``."""
        return self._request("DELETE", f"/instance/{quote(instance_id, safe='')}")

    def generate(self, path: str, body: JsonObject) -> JsonObject:
        """A generation answered in one piece (``stream`` off): the reply or an error body.

        NOTE: a failure during generation arrives as an error body with status 200
        (the status is committed before generation runs); callers check for it.
        """
        return self._request("POST", path, body=body, timeout=_generation())

    def bench_chat(self, body: JsonObject) -> JsonObject:
        """``POST /bench/chat/completions``: a chat completion plus ``generation_stats``
        and ``power_usage``; like :meth:`generate`, a failure may arrive with status 200."""
        return self.generate("/bench/chat/completions", body)

    def stream(self, path: str, body: JsonObject, media_type: str) -> ReplyStream:
        """POST a streaming generation request; use the result with ``with``.

        ``media_type`` is what the route streams (``text/event-stream``,
        ``application/x-ndjson``); anything else is reported as not a Skulk node.
        """
        return ReplyStream(
            f"{self.base_url}{path}",
            media_type,
            self._http.stream("POST", path, json=body, timeout=_generation()),
        )

    def metrics_text(self) -> str:
        """``GET /metrics``: the node's Prometheus text."""
        import httpx  # noqa: PLC0415 - loaded by __init__ already

        try:
            response = self._http.get("/metrics", timeout=DEFAULT_TIMEOUT_SECONDS)
        except httpx.TransportError as exc:
            raise SkulkUnreachable(self.base_url, _describe_transport(exc)) from exc
        if response.is_error:
            raise api_error(response)
        return response.text

    def cancel(self, command_id: str) -> JsonObject:
        """``POST /v1/cancel/{command_id}``: stop an in-flight generation."""
        return self._request("POST", f"/v1/cancel/{quote(command_id, safe='')}")

    def pairing_challenge(self, body: JsonObject) -> JsonObject:
        """``POST /v1/auth/pairing-sessions/challenge``: ``challenge``, ``expiresAt`` and,
        for an invitation, ``attemptId``. The nonce travels in the body, never the URL."""
        return self._request("POST", "/v1/auth/pairing-sessions/challenge", body=body)

    def pairing_exchange(self, body: JsonObject) -> JsonObject:
        """``POST /v1/auth/pairing-sessions/exchange``: the device id and token pair."""
        return self._request("POST", "/v1/auth/pairing-sessions/exchange", body=body)

    def devices(self) -> JsonObject:
        """``GET /v1/auth/devices``: the gateway's paired devices (``devices:manage``)."""
        return self._request("GET", "/v1/auth/devices")

    def revoke_device(self, device_id: str) -> JsonObject:
        """``DELETE /v1/auth/devices/{device_id}``: both of its credentials die now."""
        return self._request("DELETE", f"/v1/auth/devices/{quote(device_id, safe='')}")

    def plugins(self) -> JsonObject:
        """``GET /v1/plugins``: installed plugins and their nodes (``plugins:read``)."""
        return self._request("GET", "/v1/plugins", headers=self._owner_headers)

    def host_network(self) -> JsonObject:
        """``GET /v1/plugins/host-network``: this node's live fabric listeners, node id,
        network version and namespace fingerprint (``plugins:read``)."""
        return self._request("GET", "/v1/plugins/host-network", headers=self._owner_headers)

    def managed_plugin(self, plugin_id: str) -> JsonObject:
        """``GET /v1/plugins/managed/installations/{plugin_id}``: one installation."""
        path = f"/v1/plugins/managed/installations/{quote(plugin_id, safe='')}"
        return self._request("GET", path, headers=self._owner_headers)

    def submit_plugin_operation(self, plugin_id: str, body: JsonObject) -> JsonObject:
        """``POST .../installations/{plugin_id}/operations`` (``plugins:manage``)."""
        path = f"/v1/plugins/managed/installations/{quote(plugin_id, safe='')}/operations"
        return self._request("POST", path, body=body, headers=self._owner_headers)

    def plugin_operation(self, plugin_id: str, operation_id: str) -> JsonObject:
        """``GET .../installations/{plugin_id}/operations/{operation_id}``."""
        path = (
            f"/v1/plugins/managed/installations/{quote(plugin_id, safe='')}"
            f"/operations/{quote(operation_id, safe='')}"
        )
        return self._request("GET", path, headers=self._owner_headers)

    # -- the model store (a store host answers slowly while it walks its disk) --

    def store_health(self) -> JsonObject:
        return self._request("GET", "/store/health", timeout=STORE_TIMEOUT_SECONDS)

    def store_registry(self) -> JsonObject:
        return self._request("GET", "/store/registry", timeout=STORE_TIMEOUT_SECONDS)

    def store_downloads(self) -> list[JsonObject]:
        found = self._request("GET", "/store/downloads", listing=True)
        rows = found.get("results")
        return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []

    def delete_store_model(self, model_id: str) -> JsonObject:
        """``DELETE /store/models/{model_id}``, the id raw (its ``/`` unescaped)."""
        return self._request("DELETE", _store_model_path(model_id), timeout=STORE_TIMEOUT_SECONDS)

    def purge_staging(self, model_id: str | None = None) -> JsonObject:
        body: JsonObject = {} if model_id is None else {"modelId": model_id}
        return self._request("POST", "/store/purge-staging", body, timeout=STORE_TIMEOUT_SECONDS)

    def plugin_node(
        self, plugin_id: str, node_id: str, facet: str, body: JsonObject | None = None
    ) -> JsonObject:
        """``GET`` (or, with ``body``, ``POST``) ``/v1/plugins/{plugin}/nodes/{node}/{facet}``:
        a node's ``configuration`` or ``credentials``."""
        path = f"/v1/plugins/{quote(plugin_id, safe='')}/nodes/{quote(node_id, safe='')}/{facet}"
        method = "GET" if body is None else "POST"
        return self._request(method, path, body=body, headers=self._owner_headers)

    def speech(self, body: JsonObject) -> tuple[bytes, str]:
        """``POST /v1/audio/speech``: the audio bytes and their media type."""
        response = self._raw("POST", "/v1/audio/speech", json=body)
        return response.content, response.headers.get("content-type", "")

    def transcribe(
        self, path: str, fields: dict[str, str], file_name: str, audio: bytes | IO[bytes]
    ) -> tuple[str, str]:
        """``POST /v1/audio/transcriptions`` (or ``translations``): the body as text and
        its media type. ``audio`` may be an open file, read as it is sent."""
        response = self._raw("POST", path, data=fields, files={"file": (file_name, audio)})
        return response.text, response.headers.get("content-type", "")

    def voices(self, model: str) -> JsonObject:
        """``GET /v1/audio/voices?model=``: one mounted TTS model's declared voices."""
        return self._request("GET", "/v1/audio/voices", params=(("model", model),))

    def _raw(
        self,
        method: str,
        path: str,
        *,
        json: JsonObject | None = None,
        data: dict[str, str] | None = None,
        files: dict[str, tuple[str, bytes | IO[bytes]]] | None = None,
    ) -> httpx.Response:
        """A speech request, answered with audio or text rather than a JSON object."""
        import httpx  # noqa: PLC0415 - loaded by __init__ already

        try:
            response = self._http.request(
                method, path, json=json, data=data, files=files, timeout=_generation()
            )
        except httpx.TransportError as exc:
            raise SkulkUnreachable(self.base_url, _describe_transport(exc)) from exc
        if response.is_error:
            raise api_error(response)
        return response

    def _request(
        self,
        method: str,
        path: str,
        body: JsonObject | None = None,
        *,
        params: tuple[tuple[str, str], ...] | None = None,
        timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT_SECONDS,
        listing: bool = False,
        headers: dict[str, str] | None = None,
    ) -> JsonObject:
        import httpx  # noqa: PLC0415 - loaded by __init__ already

        try:
            response = self._http.request(
                method, path, json=body, params=params, timeout=timeout, headers=headers
            )
        except httpx.TransportError as exc:
            raise SkulkUnreachable(self.base_url, _describe_transport(exc)) from exc
        if response.is_error:
            raise api_error(response)
        if not response.content:
            return {}
        try:
            parsed: object = response.json()
        except ValueError:
            parsed = None
        if listing and isinstance(parsed, list):
            return {"results": parsed}  # a route that answers with a JSON array
        if not isinstance(parsed, dict):
            raise UnexpectedResponseError(
                f"{self.base_url}{path} did not answer with a JSON object; is it a Skulk node?"
            )
        return parsed


class ReplyStream:
    """An open streamed reply. Iterate it for the body's text lines; leave the ``with``
    to close it.

    ``command_id`` (for :meth:`SkulkClient.cancel`) is known once the stream has
    opened. The format's own terminal frame says whether the reply finished; when the
    lines stop for a network failure, ``interruption`` says what happened.
    """

    def __init__(
        self, url: str, media_type: str, opener: AbstractContextManager[httpx.Response]
    ) -> None:
        self._url = url
        self._media_type = media_type
        self._opener = opener
        self._response: httpx.Response | None = None
        self.command_id: str | None = None
        self.interruption: str | None = None

    def __enter__(self) -> Self:
        import httpx  # noqa: PLC0415 - loaded by SkulkClient already

        try:
            response = self._opener.__enter__()
        except httpx.TransportError as exc:
            raise SkulkUnreachable(self._url, _describe_transport(exc)) from exc
        self._response = response
        try:
            if response.is_error:
                response.read()
                raise api_error(response)
            media_type = response.headers.get("content-type", "").partition(";")[0].strip()
            if media_type != self._media_type:
                raise UnexpectedResponseError(
                    f"{self._url} did not answer with {self._media_type} "
                    f"({media_type or 'no content type'}); is it a Skulk node?"
                )
        except BaseException:
            self.close()
            raise
        self.command_id = response.headers.get(COMMAND_ID_HEADER)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Drop the connection; the node takes that as a cancellation too."""
        if self._response is not None:
            self._response = None
            self._opener.__exit__(None, None, None)

    def __iter__(self) -> Iterator[str]:
        import httpx  # noqa: PLC0415 - loaded by SkulkClient already

        if self._response is None:
            raise RuntimeError("ReplyStream is iterated outside its `with` block")
        try:
            yield from self._response.iter_lines()
        except httpx.TransportError as exc:
            self.interruption = _describe_transport(exc)


def _generation() -> httpx.Timeout:
    import httpx  # noqa: PLC0415 - loaded by SkulkClient already

    return httpx.Timeout(DEFAULT_TIMEOUT_SECONDS, read=GENERATION_READ_TIMEOUT_SECONDS)


def api_error(response: httpx.Response) -> SkulkApiError:
    """The :class:`SkulkApiError` an error answer means."""
    message, code = _error_details(response)
    failure = response.headers.get(PLACEMENT_FAILURE_HEADER)
    return SkulkApiError(response.status_code, message, code, failure)


def _describe_transport(exc: httpx.TransportError) -> str:
    import httpx  # noqa: PLC0415 - loaded by SkulkClient already

    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return str(exc) or type(exc).__name__


def _error_details(response: httpx.Response) -> tuple[str, str | None]:
    """The message and code of an error answer: the OpenAI-style envelope (Claude's
    error document has the same ``error.message``), or Ollama's plain string."""
    fallback = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    try:
        body: object = response.json()
    except ValueError:
        return fallback, None
    if not isinstance(body, dict):
        return fallback, None
    error = body.get("error")
    if isinstance(error, str) and error:
        return error, None  # Ollama's shape: {"error": "message"}
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code")
        return (
            message if isinstance(message, str) and message else fallback,
            str(code) if code is not None else None,
        )
    # Not the envelope (a proxy, or a framework default): take any plain detail.
    detail = body.get("detail")
    if isinstance(detail, str) and detail:
        return detail, None
    return fallback, None


def _store_model_path(model_id: str) -> str:
    """The id travels raw (its ``/`` unescaped), the rest of it escaped; a ``.`` or
    ``..`` part is escaped too, so the HTTP client does not resolve it away and the
    node refuses it by name."""
    parts = model_id.split("/")
    escaped = [p.replace(".", "%2E") if p in (".", "..") else quote(p, safe="") for p in parts]
    return "/store/models/" + "/".join(escaped)
