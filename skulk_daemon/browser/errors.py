"""What can go wrong in a browser tool, with the HTTP status a client should see.

The controller turns these into the API's error envelope; the messages are written for
the operator or the model reading them, and never carry secrets (the search API key is
not part of any URL or message).
"""

from __future__ import annotations


class BrowserToolError(Exception):
    """A browser-tool failure: ``status`` and ``code`` are what the API answers."""

    status: int = 502
    code: str = "upstream_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidUrl(BrowserToolError):
    """Not an absolute http(s) URL, or one this node will not send credentials to."""

    status = 400
    code = "invalid_url"


class AddressRefused(BrowserToolError):
    """The URL (or a redirect hop) resolves to an address the SSRF policy refuses."""

    status = 400
    code = "address_refused"


class UpstreamError(BrowserToolError):
    """DNS, connection, TLS or protocol failure, a bad redirect chain, or an error status."""

    status = 502
    code = "upstream_error"


class UpstreamTimeout(BrowserToolError):
    status = 504
    code = "upstream_timeout"


class UnsupportedContent(BrowserToolError):
    """extract_page was pointed at something that is not HTML or text (a PDF, an image)."""

    status = 422
    code = "unsupported_content_type"


class SearchNotConfigured(BrowserToolError):
    status = 503
    code = "search_not_configured"


class InvalidRequest(BrowserToolError):
    status = 400
    code = "invalid_request"


class UpstreamStatus(UpstreamError):
    """extract_page got an error page (HTTP 4xx/5xx) instead of the page asked for."""

    code = "upstream_status"
