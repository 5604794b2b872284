"""The one HTTP client the CLI uses to talk to a Skulk node.

Every method returns the node's parsed JSON object unchanged (``--json`` prints it
as is) and turns every way a request can fail into one of three exceptions, so
commands never see an httpx error.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    import httpx

DEFAULT_API_URL = "http://localhost:52415"
# Control-plane reads answer from memory; a node that takes longer is wedged or gone.
DEFAULT_TIMEOUT_SECONDS = 10.0

JsonObject = dict[str, object]


class SkulkApiError(Exception):
    """The node answered, and refused: an HTTP error status."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


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

    def __init__(self, base_url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        # NOTE: httpx is imported on first use, not with the CLI: it costs about half
        # a second, which every shell completion and `--help` would otherwise pay.
        import httpx  # noqa: PLC0415

        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)

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

    def config(self) -> JsonObject:
        """``GET /config``: ``config`` (secrets stripped), ``path`` and ``effective``."""
        return self._request("GET", "/config")

    def put_config(self, document: JsonObject) -> JsonObject:
        """``PUT /config`` with the full desired document; 422 when it is invalid."""
        return self._request("PUT", "/config", body={"config": document})

    def _request(self, method: str, path: str, body: JsonObject | None = None) -> JsonObject:
        import httpx  # noqa: PLC0415 - loaded by __init__ already

        try:
            response = self._http.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise SkulkUnreachable(self.base_url, _describe_transport(exc)) from exc
        if response.is_error:
            message, code = _error_details(response)
            raise SkulkApiError(response.status_code, message, code)
        if not response.content:
            return {}
        try:
            parsed: object = response.json()
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise UnexpectedResponseError(
                f"{self.base_url}{path} did not answer with a JSON object; is it a Skulk node?"
            )
        return parsed


def _describe_transport(exc: httpx.TransportError) -> str:
    import httpx  # noqa: PLC0415 - loaded by SkulkClient already

    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return str(exc) or type(exc).__name__


def _error_details(response: httpx.Response) -> tuple[str, str | None]:
    """The message and code of an error answer, preferring the OpenAI-style envelope."""
    fallback = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    try:
        body: object = response.json()
    except ValueError:
        return fallback, None
    if not isinstance(body, dict):
        return fallback, None
    error = body.get("error")
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
