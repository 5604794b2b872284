"""The browser tools against pages served from this machine.

A local HTTP server stands in for the web (article, redirect chain, text, PDF, huge
page, slow page, SearXNG's JSON API, DuckDuckGo's HTML endpoint). It listens on
loopback, which the SSRF policy refuses by default, so the happy paths run on a daemon
configured with ``allow_private_addresses`` and the refusals on one left at defaults.
Where a test needs a public-looking host, it swaps the resolver (and, with no internet
here, the transport) of the real fetcher, whose policy stays the real one.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from skulk_core.config import BrowserToolsConfig, SearchProviderName
from skulk_daemon.browser import serving
from skulk_daemon.browser.addresses import Resolver
from skulk_daemon.browser.errors import (
    AddressRefused,
    UpstreamError,
    UpstreamTimeout,
)
from skulk_daemon.browser.fetch import FetchSettings, fetch
from skulk_daemon.browser.protocol import ExtractPageRequest, WebSearchRequest
from tests import log_secrets
from tests.daemon_process import DaemonFactory, DaemonProcess

ARTICLE_PARAGRAPH = "Red foxes hunt at dusk, listening for voles under the snow. " * 4

ARTICLE = f"""<!doctype html><html><head><title>Foxes at dusk</title>
<style>.x {{ color: red }}</style><script>var noise = "SCRIPT-NOISE";</script></head>
<body><nav>NAV-NOISE</nav><header>HEADER-NOISE</header>
<main><article><h1>Foxes at dusk</h1><p>{ARTICLE_PARAGRAPH}</p>
<p>They cache food for later.</p></article><aside>ASIDE-NOISE</aside></main>
<footer>FOOTER-NOISE</footer></body></html>"""

HUGE_PARAGRAPH = "Foxes are canids with a bushy tail and a narrow snout. "
HUGE = "<html><body>" + f"<p>{HUGE_PARAGRAPH}</p>" * 2000 + "</body></html>"
BIG_TEXT_BYTES = 6 * 1024 * 1024
SLOW_SECONDS = 4.0

SEARX_RESULTS = [
    {"title": "Skulk", "url": "https://skulk.example/", "content": "Distributed inference."},
    {"title": "Not a page", "url": "javascript:alert(1)", "content": "dropped"},
    {"title": "Foxlight", "url": "https://foxlight.example/", "content": "A  fox\nlight."},
    {"title": "Skulk again", "url": "https://skulk.example/", "content": "duplicate"},
    *(
        {"title": f"Result {n}", "url": f"https://r{n}.example/", "content": f"snippet {n}"}
        for n in range(10)
    ),
]

DDG_RESULTS = """<html><body>
<div class="result results_links result--ad"><h2 class="result__title">
<a class="result__a" href="https://duckduckgo.com/y.js?ad_domain=x.example&ad_provider=b">Ad</a>
</h2></div>
<div class="result results_links web-result"><div class="result__body">
<h2 class="result__title"><a class="result__a"
 href="//duckduckgo.com/l/?uddg=https%3A%2F%2Ffox.example%2F&rut=1">Fox {q}</a></h2>
<a class="result__snippet">All about {q}.</a></div></div>
</body></html>"""


SEARCH_KEY = "sk-browser-secret"
log_secrets.register("browser_tools.search_api_key", SEARCH_KEY)
# (path, Authorization header) of every request the fake SearXNG answered, in order.
seen_searches: list[tuple[str, str | None]] = []


class _Pages(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str | None, **headers: str) -> None:
        try:
            self.send_response(status)
            if content_type is not None:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The fetcher stops reading at its bound and hangs up: that is the point.
            pass

    def _redirect(self, location: str) -> None:
        self._send(302, b"", "text/html", Location=location)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        html = "text/html; charset=utf-8"
        if path == "/article":
            self._send(200, ARTICLE.encode(), html)
        elif path.startswith("/redirect/"):
            left = int(path.rsplit("/", 1)[1])
            self._redirect("/article" if left == 0 else f"/redirect/{left - 1}")
        elif path == "/loop":
            self._redirect("/loop")
        elif path == "/to-ftp":
            self._redirect("ftp://files.example/x")
        elif path == "/plain":
            self._send(200, b"Plain words.\r\n\r\n\r\n\r\nMore words.\n", "text/plain")
        elif path == "/untyped":
            self._send(200, b"<html><head><title>Untyped</title></head><p>Hi</p></html>", None)
        elif path == "/paper.pdf":
            self._send(200, b"%PDF-1.7\n\x00\x01\x02binary", "application/pdf")
        elif path == "/huge":
            self._send(200, HUGE.encode(), html)
        elif path == "/big.txt":
            self._send(200, b"a " * (BIG_TEXT_BYTES // 2), "text/plain; charset=us-ascii")
        elif path == "/missing":
            self._send(404, b"<title>Not here</title><p>Nothing.</p>", html)
        elif path == "/slow":
            time.sleep(SLOW_SECONDS)
            self._send(200, b"late", "text/plain")
        elif path == "/echo-host":
            self._send(200, (self.headers.get("Host") or "").encode(), "text/plain")
        elif path in ("/searx/search", "/moved/search"):
            seen_searches.append((path, self.headers.get("Authorization")))
            query = parse_qs(parts.query)
            if query.get("format") != ["json"]:
                self._send(403, b"Forbidden", "text/html")
                return
            document = {"query": query["q"][0], "results": SEARX_RESULTS}
            self._send(200, json.dumps(document).encode(), "application/json")
        else:
            self._send(404, b"no such page", "text/plain")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode())
        if self.path == "/ddg/html/" and "q" in form:
            self._send(200, DDG_RESULTS.format(q=form["q"][0]).encode(), "text/html")
        else:
            self._send(400, b"bad request", "text/plain")


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope="module")
def tls_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ssl.SSLContext]]:
    """The same pages over HTTPS, with a certificate for ``pinned.test`` only.

    Yields the server's port and a client context that trusts that certificate.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pinned.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("pinned.test")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    root = tmp_path_factory.mktemp("tls")
    (root / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (root / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(root / "cert.pem", root / "key.pem")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    server.daemon_threads = True
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client_context = ssl.create_default_context(cafile=str(root / "cert.pem"))
    yield f"{server.server_address[1]}", client_context
    server.shutdown()
    server.server_close()
    thread.join()


def _configured(root: Path, models_dir: Path, browser_tools: dict[str, object]) -> DaemonProcess:
    daemon = DaemonProcess(root=root, models_dir=models_dir)
    daemon.config_home.mkdir(parents=True)
    (daemon.config_home / "skulk.yaml").write_text(yaml.safe_dump({"browser_tools": browser_tools}))
    return daemon.start()


@pytest.fixture(scope="module")
def lan_daemon(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path, site: str
) -> Iterator[DaemonProcess]:
    """A daemon that may read LAN (here: loopback) pages and searches the fake SearXNG."""
    daemon = _configured(
        tmp_path_factory.mktemp("lan"),
        shared_models_dir,
        {
            "allow_private_addresses": True,
            "search_provider": "searxng",
            "search_url": f"{site}/searx/",
            "search_api_key": SEARCH_KEY,
            "timeout_seconds": 2,
        },
    )
    yield daemon
    daemon.kill()


@pytest.fixture(scope="module")
def default_daemon(
    tmp_path_factory: pytest.TempPathFactory, shared_models_dir: Path
) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess(root=tmp_path_factory.mktemp("default"), models_dir=shared_models_dir)
    daemon.start()
    yield daemon
    daemon.kill()


def _post(daemon: DaemonProcess, tool: str, body: object) -> httpx.Response:
    return httpx.post(f"{daemon.url}/v1/tools/{tool}", json=body, timeout=30)


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


# --- the daemon, end to end -------------------------------------------------------


@pytest.mark.slow
def test_extract_page_reads_the_article_after_redirects(
    lan_daemon: DaemonProcess, site: str
) -> None:
    response = _post(lan_daemon, "extract_page", {"url": f"{site}/redirect/3"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body == {
        "url": f"{site}/redirect/3",
        "final_url": f"{site}/article",
        "title": "Foxes at dusk",
        "text": f"Foxes at dusk\n\n{ARTICLE_PARAGRAPH.strip()}\n\nThey cache food for later.",
        "truncated": False,
        "provider": "httpx",
    }


@pytest.mark.slow
def test_open_url_reports_metadata_without_reading_binaries(
    lan_daemon: DaemonProcess, site: str
) -> None:
    article = _post(lan_daemon, "open_url", {"url": f"{site}/redirect/1"}).json()
    assert article == {
        "url": f"{site}/redirect/1",
        "final_url": f"{site}/article",
        "title": "Foxes at dusk",
        "status_code": 200,
        "content_type": "text/html",
        "provider": "httpx",
    }
    pdf = _post(lan_daemon, "open_url", {"url": f"{site}/paper.pdf"}).json()
    assert pdf["content_type"] == "application/pdf"
    assert pdf["title"] is None
    missing = _post(lan_daemon, "open_url", {"url": f"{site}/missing"}).json()
    assert (missing["status_code"], missing["title"]) == (404, "Not here")
    untyped = _post(lan_daemon, "open_url", {"url": f"{site}/untyped"}).json()
    assert (untyped["content_type"], untyped["title"]) == (None, "Untyped")


@pytest.mark.slow
def test_extract_page_text_truncation_and_refused_types(
    lan_daemon: DaemonProcess, site: str
) -> None:
    plain = _post(lan_daemon, "extract_page", {"url": f"{site}/plain"}).json()
    assert (plain["text"], plain["title"], plain["truncated"]) == (
        "Plain words.\n\nMore words.",
        None,
        False,
    )

    huge = _post(lan_daemon, "extract_page", {"url": f"{site}/huge", "max_chars": 500}).json()
    assert huge["truncated"] is True
    assert 400 < len(huge["text"]) <= 500
    assert huge["text"].startswith(HUGE_PARAGRAPH.strip())

    at_max = _post(lan_daemon, "extract_page", {"url": f"{site}/huge", "max_chars": 50000})
    assert len(at_max.json()["text"]) <= 50000

    # Past the 5 MiB read bound the body is cut, and the response says so.
    big = _post(lan_daemon, "extract_page", {"url": f"{site}/big.txt", "max_chars": 50000})
    assert big.json()["truncated"] is True

    pdf = _error(_post(lan_daemon, "extract_page", {"url": f"{site}/paper.pdf"}), 422)
    assert pdf["code"] == "unsupported_content_type"
    assert "application/pdf" in pdf["message"]

    missing = _error(_post(lan_daemon, "extract_page", {"url": f"{site}/missing"}), 502)
    assert missing["code"] == "upstream_status"
    assert "HTTP 404" in missing["message"]


@pytest.mark.slow
def test_bounds_and_bad_urls_are_refused_with_400(lan_daemon: DaemonProcess, site: str) -> None:
    for body in (
        {"url": f"{site}/article", "max_chars": 499},
        {"url": f"{site}/article", "max_chars": 50001},
        {"url": f"{site}/article", "max_chars": "many"},
        {},
    ):
        error = _error(_post(lan_daemon, "extract_page", body), 400)
        assert error["type"] == "invalid_request_error"
    assert _post(
        lan_daemon, "extract_page", {"url": f"{site}/article", "max_chars": 500}
    ).is_success

    for top_k in (0, 11):
        _error(_post(lan_daemon, "web_search", {"query": "fox", "top_k": top_k}), 400)
    assert _error(_post(lan_daemon, "web_search", {"query": "   "}), 400)["code"] == (
        "invalid_request"
    )

    for url in ("ftp://example.com/", "example.com/page", "file:///etc/passwd"):
        error = _error(_post(lan_daemon, "open_url", {"url": url}), 400)
        assert error["code"] == "invalid_url"
        assert "http://" in error["message"]


@pytest.mark.slow
def test_upstream_failures_are_502_and_timeouts_504(lan_daemon: DaemonProcess, site: str) -> None:
    loop = _error(_post(lan_daemon, "open_url", {"url": f"{site}/loop"}), 502)
    assert "more than 5" in loop["message"]
    assert _post(lan_daemon, "open_url", {"url": f"{site}/redirect/4"}).is_success
    _error(_post(lan_daemon, "open_url", {"url": f"{site}/redirect/5"}), 502)
    _error(_post(lan_daemon, "open_url", {"url": f"{site}/to-ftp"}), 502)

    closed = httpx.URL(site).copy_with(port=1)
    refused = _error(_post(lan_daemon, "extract_page", {"url": f"{closed}/"}), 502)
    assert refused["code"] == "upstream_error"

    unresolvable = _error(_post(lan_daemon, "open_url", {"url": "http://nowhere.invalid/"}), 502)
    assert "could not resolve nowhere.invalid" in unresolvable["message"]

    slow = _error(_post(lan_daemon, "extract_page", {"url": f"{site}/slow"}), 504)
    assert slow["code"] == "upstream_timeout"


@pytest.mark.slow
def test_web_search_through_searxng(lan_daemon: DaemonProcess) -> None:
    response = _post(lan_daemon, "web_search", {"query": "foxlight skulk", "top_k": 3})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "query": "foxlight skulk",
        "provider": "searxng",
        "results": [
            {
                "title": "Skulk",
                "url": "https://skulk.example/",
                "snippet": "Distributed inference.",
            },
            {"title": "Foxlight", "url": "https://foxlight.example/", "snippet": "A fox light."},
            {"title": "Result 0", "url": "https://r0.example/", "snippet": "snippet 0"},
        ],
    }
    default_k = _post(lan_daemon, "web_search", {"query": "fox"}).json()
    assert len(default_k["results"]) == 5

    config = lan_daemon.get("/config").text
    assert SEARCH_KEY not in config
    assert json.loads(config)["config"]["browser_tools"]["search_provider"] == "searxng"


@pytest.mark.slow
def test_web_search_through_duckduckgo(make_daemon: DaemonFactory, site: str) -> None:
    daemon = make_daemon()
    daemon.config_home.mkdir(parents=True)
    (daemon.config_home / "skulk.yaml").write_text(
        yaml.safe_dump(
            {"browser_tools": {"search_url": f"{site}/ddg/html/", "allow_private_addresses": True}}
        )
    )
    daemon.start()
    response = _post(daemon, "web_search", {"query": "red fox"})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "query": "red fox",
        "provider": "duckduckgo",
        "results": [
            {"title": "Fox red fox", "url": "https://fox.example/", "snippet": "All about red fox."}
        ],
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:{port}/article", "127.0.0.1 is a loopback address"),
        ("http://[::1]:{port}/article", "::1 is a loopback address"),
        ("http://localhost:{port}/article", "localhost resolves to"),
        ("http://10.0.0.1/", "10.0.0.1 is a private address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://[::ffff:127.0.0.1]:{port}/", "mapped to 127.0.0.1, a loopback address"),
        ("http://2130706433:{port}/article", "resolves to 127.0.0.1, a loopback address"),
    ],
)
def test_private_addresses_are_refused_by_default(
    default_daemon: DaemonProcess, site: str, url: str, shown: str
) -> None:
    target = url.format(port=httpx.URL(site).port)
    for tool in ("open_url", "extract_page"):
        error = _error(_post(default_daemon, tool, {"url": target}), 400)
        assert error["code"] == "address_refused"
        assert error["message"].startswith("refused: ")
        assert shown in error["message"]
        assert "browser_tools.allow_private_addresses" in error["message"]


# --- the fetcher in process: pinning, redirects to private hosts, bounds -------------


def _resolver(answers: dict[str, Sequence[str]], calls: list[str] | None = None) -> Resolver:
    async def resolve(host: str, port: int) -> Sequence[str]:
        if calls is not None:
            calls.append(host)
        return answers[host]

    return resolve


def _whole_body(_: str | None) -> int:
    return 1 << 20


def test_the_checked_address_is_the_one_connected_to(site: str) -> None:
    port = httpx.URL(site).port
    calls: list[str] = []
    settings = FetchSettings(
        allow_private=True, resolver=_resolver({"pinned.test": ["127.0.0.1"]}, calls)
    )
    page = asyncio.run(fetch(f"http://pinned.test:{port}/echo-host", settings, _whole_body))
    # The request went to the checked address and still named the host.
    assert page.body == f"pinned.test:{port}".encode()
    assert page.final_url == f"http://pinned.test:{port}/echo-host"
    assert calls == ["pinned.test"]


def test_tls_verifies_the_hostname_while_connecting_to_the_checked_address(
    tls_site: tuple[str, ssl.SSLContext],
) -> None:
    port, trusted = tls_site
    resolver = _resolver({"pinned.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    settings = FetchSettings(
        allow_private=True,
        resolver=resolver,
        transport=httpx.AsyncHTTPTransport(verify=trusted),
    )
    # The certificate names pinned.test, not 127.0.0.1: this only verifies because
    # the TLS server name is the hostname although the socket goes to the address.
    page = asyncio.run(fetch(f"https://pinned.test:{port}/echo-host", settings, _whole_body))
    assert page.body == f"pinned.test:{port}".encode()
    with pytest.raises(UpstreamError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(fetch(f"https://other.test:{port}/echo-host", settings, _whole_body))


def test_an_unreachable_address_falls_back_to_the_next(site: str) -> None:
    port = httpx.URL(site).port
    # Nothing listens on 127.0.0.2 at this port; the server is on 127.0.0.1.
    settings = FetchSettings(
        allow_private=True, resolver=_resolver({"two.test": ["127.0.0.2", "127.0.0.1"]})
    )
    page = asyncio.run(fetch(f"http://two.test:{port}/echo-host", settings, _whole_body))
    assert page.status_code == 200


def test_a_public_page_redirecting_to_loopback_is_refused(site: str) -> None:
    """The redirect hop is checked like the first URL, before anything connects to it."""
    seen: list[httpx.Request] = []

    def public_internet(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(302, headers={"Location": f"{site}/article"})

    calls: list[str] = []
    settings = FetchSettings(
        resolver=_resolver({"news.example": ["93.184.216.34"]}, calls),
        transport=httpx.MockTransport(public_internet),
    )
    with pytest.raises(AddressRefused) as refused:
        asyncio.run(fetch("https://news.example/story", settings, _whole_body))
    assert "127.0.0.1 is a loopback address" in str(refused.value)
    # One request, to the checked public address, with the real name for Host and SNI.
    assert [str(request.url) for request in seen] == ["https://93.184.216.34/story"]
    assert seen[0].headers["Host"] == "news.example"
    assert seen[0].extensions["sni_hostname"] == "news.example"
    assert calls == ["news.example"]


def test_a_name_that_rebinds_to_loopback_is_refused_on_the_hop() -> None:
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])

    async def rebinding(host: str, port: int) -> Sequence[str]:
        return next(answers)

    def public_internet(request: httpx.Request) -> httpx.Response:
        assert request.url.host == "93.184.216.34"
        return httpx.Response(301, headers={"Location": "/again"})

    settings = FetchSettings(resolver=rebinding, transport=httpx.MockTransport(public_internet))
    with pytest.raises(AddressRefused, match=r"rebind\.example resolves to a non-public address"):
        asyncio.run(fetch("http://rebind.example/", settings, _whole_body))


def test_the_body_is_read_only_up_to_the_limit(site: str) -> None:
    settings = FetchSettings(allow_private=True)
    page = asyncio.run(fetch(f"{site}/big.txt", settings, lambda _: 1000))
    assert (len(page.body), page.body_truncated) == (1000, True)
    exact = asyncio.run(fetch(f"{site}/plain", settings, lambda _: 1 << 20))
    assert exact.body_truncated is False
    none = asyncio.run(fetch(f"{site}/paper.pdf", settings, lambda _: 0))
    assert (none.body, none.content_type) == (b"", "application/pdf")


def test_the_whole_call_is_bounded_in_time(site: str) -> None:
    settings = FetchSettings(allow_private=True, timeout_seconds=0.5)
    with pytest.raises(UpstreamTimeout, match=r"did not answer within 0\.5 seconds"):
        asyncio.run(fetch(f"{site}/slow", settings, _whole_body))


def test_extract_page_marks_a_cut_body_as_truncated(site: str) -> None:
    settings = FetchSettings(allow_private=True)
    request = ExtractPageRequest(url=f"{site}/big.txt", max_chars=50000)
    result = asyncio.run(serving.extract_page(request, settings))
    assert result.truncated is True
    assert len(result.text) <= 50000


def test_searxng_errors_name_the_fix(site: str) -> None:
    config = BrowserToolsConfig(
        search_provider=SearchProviderName.SEARXNG,
        search_url=f"{site}/nowhere",
        allow_private_addresses=True,
    )
    with pytest.raises(UpstreamError, match=r"SearXNG \(127\.0\.0\.1:\d+\) answered HTTP 404"):
        asyncio.run(serving.web_search(WebSearchRequest(query="fox"), config))


@pytest.mark.slow
def test_a_search_url_moved_elsewhere_never_receives_the_stored_key(
    lan_daemon: DaemonProcess, site: str
) -> None:
    # Last in the module: it changes the shared daemon's search provider for good.
    seen_searches.clear()
    assert _post(lan_daemon, "web_search", {"query": "fox"}).status_code == 200
    assert seen_searches == [("/searx/search", f"Bearer {SEARCH_KEY}")]

    config = lan_daemon.get("/config").json()["config"]
    for url in (f"{site}/moved/", f"{site}/searx/"):
        tools = {**config["browser_tools"], "search_url": url}
        changed = httpx.put(
            f"{lan_daemon.url}/config", json={**config, "browser_tools": tools}, timeout=30
        )
        assert changed.status_code == 200, changed.text
        assert _post(lan_daemon, "web_search", {"query": "fox"}).status_code == 200
    # The key went with the old destination: neither the new URL nor the old one, set
    # again afterwards, is sent it.
    assert seen_searches[1:] == [("/moved/search", None), ("/searx/search", None)]
