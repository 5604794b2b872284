"""How the CLI's client talks HTTP to a Skulk node: the connection, one JSON request,
and every way a request can fail turned into one of three exceptions (commands never
see an httpx error). The routes themselves are :class:`~skulk_cli.client.SkulkClient`'s.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import IO, TYPE_CHECKING, Self, cast

if TYPE_CHECKING:
    import ssl

    import httpx

DEFAULT_API_URL = "http://localhost:52415"
# Control-plane reads answer from memory; a node that takes longer is wedged or gone.
DEFAULT_TIMEOUT_SECONDS = 10.0
STORE_TIMEOUT_SECONDS = 60.0
DIAGNOSTICS_TIMEOUT_SECONDS = 30.0
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
    """Nothing answered at the API URL (refused, unresolvable, timed out, reset).

    ``busy``: the node took the request but sent no answer in time (a read timeout),
    which is a slow node, not a missing one.
    """

    def __init__(self, base_url: str, reason: str, *, busy: bool = False) -> None:
        super().__init__(f"{base_url}: {reason}")
        self.base_url = base_url
        self.reason = reason
        self.busy = busy


class UnexpectedResponseError(Exception):
    """Something answered, but not in the shape a Skulk node answers in."""


class NodeHttp:
    """One node's HTTP connection. Use it (and the client built on it) as a context
    manager."""

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
        _skip_httpx_command_line()
        import httpx  # noqa: PLC0415

        self.base_url = base_url.rstrip("/")
        if verify is True and self.base_url.lower().startswith("http://"):
            verify = _no_tls()
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

    def _text(self, path: str) -> str:
        """``GET path`` answered with text (not JSON)."""
        import httpx  # noqa: PLC0415 - loaded by __init__ already

        try:
            response = self._http.get(path, timeout=DEFAULT_TIMEOUT_SECONDS)
        except httpx.TransportError as exc:
            raise unreachable(self.base_url, exc) from exc
        if response.is_error:
            raise api_error(response)
        return response.text

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
                method, path, json=json, data=data, files=files, timeout=generation_timeout()
            )
        except httpx.TransportError as exc:
            raise unreachable(self.base_url, exc) from exc
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
            raise unreachable(self.base_url, exc) from exc
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


def _skip_httpx_command_line() -> None:
    """Have httpx, when first imported, leave out its own ``httpx`` command line.

    NOTE: httpx's package imports its own command line (click, pygments, rich's
    progress bars and syntax highlighting: about a tenth of `skulk status`) whenever
    click is installed, and falls back to a stub where that import fails, as it does
    without the ``httpx[cli]`` extra. The CLI never runs httpx's command line, so it
    takes the stub: a ``None`` in ``sys.modules`` makes that one import fail.
    """
    if "httpx" not in sys.modules:
        # A None entry makes that import fail (sys.modules is typed as modules only).
        cast("dict[str, object]", sys.modules).setdefault("httpx._main", None)


def _no_tls() -> ssl.SSLContext:
    """The TLS context of a client for a plain ``http://`` node: it trusts no
    certificate, so any TLS connection it were asked to make would fail closed.

    NOTE: httpx builds a verifying context for every client, reading and parsing the
    CA bundle (about 40 ms of CPU, a tenth of `skulk status` before issue 43); a
    client whose every request is plain HTTP has no use for one.
    """
    import ssl  # noqa: PLC0415 - loaded with httpx by then

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, with no CA to verify against


def generation_timeout() -> httpx.Timeout:
    import httpx  # noqa: PLC0415 - loaded by SkulkClient already

    return httpx.Timeout(DEFAULT_TIMEOUT_SECONDS, read=GENERATION_READ_TIMEOUT_SECONDS)


def api_error(response: httpx.Response) -> SkulkApiError:
    """The :class:`SkulkApiError` an error answer means."""
    message, code = error_details(response)
    failure = response.headers.get(PLACEMENT_FAILURE_HEADER)
    return SkulkApiError(response.status_code, message, code, failure)


def unreachable(base_url: str, exc: httpx.TransportError) -> SkulkUnreachable:
    """What a failed request means: nothing there, or a node too busy to answer."""
    import httpx  # noqa: PLC0415 - loaded by SkulkClient already

    busy = isinstance(exc, httpx.ReadTimeout)
    return SkulkUnreachable(base_url, describe_transport(exc), busy=busy)


def describe_transport(exc: httpx.TransportError) -> str:
    import httpx  # noqa: PLC0415 - loaded by SkulkClient already

    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return str(exc) or type(exc).__name__


def error_details(response: httpx.Response) -> tuple[str, str | None]:
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
