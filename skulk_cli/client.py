"""The one HTTP client the CLI uses to talk to a Skulk node.

Every method returns the node's parsed JSON object unchanged (``--json`` prints it
as is) and turns every way a request can fail into one of three exceptions, so
commands never see an httpx error (:mod:`skulk_cli.node_http`). A streamed reply is
read through :class:`ReplyStream`, which yields its body's lines; ``wire_formats``
reads them. The model routes' calls are :mod:`skulk_cli.client_models`', the plugin
routes' :mod:`skulk_cli.client_plugins`'.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import IO, TYPE_CHECKING, Self
from urllib.parse import quote

from skulk_cli.client_media import MediaCalls
from skulk_cli.client_models import ModelCalls
from skulk_cli.client_ops import OpsCalls
from skulk_cli.client_plugins import PluginCalls
from skulk_cli.client_steward import StewardCalls
from skulk_cli.node_http import (
    COMMAND_ID_HEADER,
    DEFAULT_API_URL,
    DEFAULT_TIMEOUT_SECONDS,
    DIAGNOSTICS_TIMEOUT_SECONDS,
    PLACEMENT_TIMEOUT_SECONDS,
    JsonObject,
    SkulkApiError,
    SkulkUnreachable,
    UnexpectedResponseError,
    api_error,
    describe_transport,
    generation_timeout,
    unreachable,
)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import httpx

__all__ = [
    "DEFAULT_API_URL",
    "JsonObject",
    "ReplyStream",
    "SkulkApiError",
    "SkulkClient",
    "SkulkUnreachable",
    "UnexpectedResponseError",
    "api_error",
]


class SkulkClient(ModelCalls, PluginCalls, OpsCalls, MediaCalls, StewardCalls):
    """A typed client for the routes the CLI uses. Use it as a context manager."""

    def node_identity(self) -> JsonObject:
        """``GET /node/identity``: ``nodeId``, ``hostname``, ``ipAddress``."""
        return self._request("GET", "/node/identity")

    def state(self) -> JsonObject:
        """``GET /state``: the cluster state with telemetry and derived health."""
        return self._request("GET", "/state")

    def config(self) -> JsonObject:
        """``GET /config``: ``config`` (secrets stripped), ``path`` and ``effective``."""
        return self._request("GET", "/config")

    def diagnostics(self, node_id: str | None = None) -> JsonObject:
        """``GET /v1/diagnostics/node``, or another member's through ``/cluster/{id}``."""
        path = "/v1/diagnostics/node" if node_id is None else f"/v1/diagnostics/cluster/{node_id}"
        # The bundle asks every runner: a runner still loading answers late.
        return self._request("GET", path, timeout=DIAGNOSTICS_TIMEOUT_SECONDS)

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
        allow_duplicate: bool = False,
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
        if allow_duplicate:
            body["allow_duplicate"] = True
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
        return self._request("POST", path, body=body, timeout=generation_timeout())

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
            self._http.stream("POST", path, json=body, timeout=generation_timeout()),
        )

    def metrics_text(self) -> str:
        """``GET /metrics``: the node's Prometheus text."""
        return self._text("/metrics")

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
            raise unreachable(self._url, exc) from exc
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
            self.interruption = describe_transport(exc)
