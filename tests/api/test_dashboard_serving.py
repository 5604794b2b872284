"""The dashboard as the API port serves it: the shell at every page path, its files
under ``/ui`` with the right types, the security headers and revalidation, nothing
outside its directory, and no API route shadowed."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from skulk_daemon.api.dashboard import CONTENT_SECURITY_POLICY, PAGE_PATHS
from skulk_daemon.dashboard.assets import STATIC_DIR, AssetManifest
from tests.api.in_process import AppNode

PAGES = ["/", "/cluster", "/catalog", "/chat", "/downloads", "/node/some-node-id"]
PAGES += ["/traces", "/traces/abc", "/performance", "/settings", "/plugins"]


def _security_headers_present(headers: Mapping[str, str]) -> None:
    assert headers.get("content-security-policy") == CONTENT_SECURITY_POLICY
    assert headers.get("x-content-type-options") == "nosniff"
    assert headers.get("referrer-policy") == "no-referrer"


@pytest.mark.parametrize("path", PAGES)
def test_every_page_path_answers_the_shell_with_the_strict_headers(
    bare_app: AppNode, path: str
) -> None:
    response = bare_app.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script type="module" src="/ui/app.js"></script>' in response.text
    _security_headers_present(response.headers)
    assert response.headers["cache-control"] == "no-cache"


def test_the_csp_forbids_inline_code_and_other_origins() -> None:
    directives = dict(d.strip().split(" ", 1) for d in CONTENT_SECURITY_POLICY.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/pages/cluster.js", "text/javascript; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
        ("/ui/icon.svg", "image/svg+xml"),
    ],
)
def test_files_carry_their_type_and_revalidate_by_etag(
    bare_app: AppNode, path: str, content_type: str
) -> None:
    first = bare_app.get(path)
    assert first.status_code == 200
    assert first.headers["content-type"] == content_type
    _security_headers_present(first.headers)
    etag = first.headers["etag"]
    again = bare_app.get(path, headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag
    changed = bare_app.get(path, headers={"If-None-Match": '"something-else"'})
    assert changed.status_code == 200
    assert changed.content == first.content


@pytest.mark.parametrize(
    "path",
    [
        "/ui/../pyproject.toml",
        "/ui/%2e%2e/%2e%2e/api/app.py",
        "/ui/..%2F..%2Fapi%2Fapp.py",
        "/ui//etc/passwd",
        "/ui/pages/../../assets.py",
        "/ui/assets.py",
        "/ui/__init__.py",
        "/ui/missing.js",
        "/ui/",
    ],
)
def test_nothing_outside_the_dashboard_files_is_served(bare_app: AppNode, path: str) -> None:
    response = bare_app.get(path)
    assert response.status_code == 404
    assert "import" not in response.text


def test_api_routes_keep_their_json_answers(bare_app: AppNode) -> None:
    # The Models page lives at /catalog: GET /models stays the API's catalog.
    assert bare_app.get("/models").headers["content-type"].startswith("application/json")
    identity = bare_app.get("/node/identity")
    assert identity.status_code == 200
    assert "nodeId" in identity.json() or "node_id" in identity.json()
    assert bare_app.get("/onboarding").json() == {"completed": False}
    unknown = bare_app.get("/v1/no-such-route")
    assert unknown.status_code == 404
    assert unknown.headers["content-type"].startswith("application/json")


def test_a_page_named_by_another_host_is_refused(bare_app: AppNode) -> None:
    # DNS rebinding: the dashboard is under the same Host check as every route.
    response = bare_app.get("/cluster", headers={"Host": "attacker.example"})
    assert response.status_code == 421


def test_the_route_table_of_the_page_matches_the_server() -> None:
    app_js = (STATIC_DIR / "app.js").read_text()
    client = {m.group(1) for m in re.finditer(r'\{ path: "([^"]+)"', app_js)}
    server = {re.sub(r"\{(\w+):str\}", r":\1", p) for p in PAGE_PATHS}
    server = {p.replace(":node_id", ":id").replace(":trace_id", ":id") for p in server}
    assert client == server


def test_no_file_uses_inline_script_style_or_inner_html() -> None:
    for path in STATIC_DIR.rglob("*"):
        if path.suffix not in {".html", ".js"}:
            continue
        text = path.read_text()
        assert not re.search(r"\.(inner|outer)HTML\s*=|insertAdjacentHTML|document\.write", text), (
            path
        )
        assert "style=" not in text, path
        assert "<script>" not in text and "javascript:" not in text, path
        if path.suffix == ".html":
            assert re.findall(r"<script(?![^>]*\bsrc=)", text) == [], path


def test_the_manifest_never_follows_a_symlink_out(tmp_path: Path) -> None:
    root = tmp_path / "static"
    (root / "pages").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html>")
    (root / "pages" / "a.js").write_text("export {};")
    secret = tmp_path / "secret.js"
    secret.write_text("secret")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.js").write_text("secret")
    os.symlink(secret, root / "linked.js")
    os.symlink(outside, root / "linked-dir")
    (root / "notes.py").write_text("not served")
    manifest = AssetManifest.load(root)
    assert manifest.paths() == ["index.html", "pages/a.js"]
    assert manifest.find("linked.js") is None
    assert manifest.find("linked-dir/b.js") is None
    assert manifest.find("pages/../index.html") is None
    assert manifest.find("pages/a.js") is not None


def test_the_shipped_files_are_all_in_the_manifest() -> None:
    manifest = AssetManifest.load()
    expected = {"index.html", "app.js", "api.js", "live.js", "dom.js", "style.css"}
    assert expected <= set(manifest.paths())
    assert {f"pages/{p}.js" for p in ("cluster", "node", "chat", "settings")} <= set(
        manifest.paths()
    )


def test_every_stylesheet_block_is_closed() -> None:
    # An unclosed @media swallows every rule after it: the pages below it lose their
    # layout at desktop width while a phone still looks right.
    for sheet in STATIC_DIR.rglob("*.css"):
        text = re.sub(r"/\*.*?\*/", "", sheet.read_text(), flags=re.S)
        depth = 0
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("@media"):
                assert depth == 0, f"{sheet.name}:{number}: @media inside an open block"
            depth += line.count("{") - line.count("}")
            assert depth >= 0, f"{sheet.name}:{number}: a block closed twice"
        assert depth == 0, f"{sheet.name}: {depth} block(s) never closed"
