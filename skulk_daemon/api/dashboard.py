"""The dashboard's routes: the page shell at ``/`` and each page path, its files under
``/ui/``.

Every page path answers the same ``index.html``; the page's own router
(``static/app.js``) mounts the page the path names, so a deep link or a reload lands
where it was. The paths are explicit (no catch-all), so an unknown API path keeps its
JSON 404 and no API route is shadowed: the Models page lives at ``/catalog`` because
``GET /models`` is the API's. The routes are ``OPEN`` like every read, under the same
guard (Host and Origin checks, API keys for callers not on this machine), and are left
out of the OpenAPI document (they are not API operations).

Each answer carries a strict Content-Security-Policy (no inline script or style, no
third-party origin), ``nosniff`` and ``no-referrer``; files revalidate by ETag.
"""

from __future__ import annotations

import functools
from typing import Final

from litestar import Controller, Request, get
from litestar.datastructures import State
from litestar.response import Response

from skulk_daemon.api.authority import declare
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.dashboard.assets import Asset, AssetManifest

ASSET_PREFIX: Final = "/ui"
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
CACHE_CONTROL: Final = "no-cache"
"""Files keep their names across releases, so a browser revalidates (a 304 by ETag)."""
PAGE_PATHS: Final = (
    "/",
    "/cluster",
    "/catalog",
    "/chat",
    "/downloads",
    "/node/{node_id:str}",
    "/traces",
    "/traces/{trace_id:str}",
    "/performance",
    "/settings",
    "/plugins",
)
"""The paths the page's router knows (``static/app.js`` keeps the same table)."""


@functools.cache
def manifest() -> AssetManifest:
    """The packaged files, read once per process."""
    return AssetManifest.load()


def _answer(request: Request[None, None, State], asset: Asset) -> Response[bytes]:
    headers = {**SECURITY_HEADERS, "ETag": asset.etag, "Cache-Control": CACHE_CONTROL}
    if asset.etag in _etags(request.headers.get("if-none-match")):
        return Response(content=b"", status_code=304, headers=headers)
    return Response(content=asset.body, media_type=asset.content_type, headers=headers)


def _etags(header: str | None) -> set[str]:
    if not header:
        return set()
    return {tag.strip().removeprefix("W/") for tag in header.split(",")}


def not_found() -> Response[bytes]:
    return Response(
        content=b"no such dashboard file\n",
        status_code=404,
        media_type="text/plain; charset=utf-8",
        headers=SECURITY_HEADERS,
    )


class DashboardController(Controller):
    tags = ("Dashboard",)
    opt = declare(Requirement.OPEN)

    @get(list(PAGE_PATHS), include_in_schema=False)
    async def page(self, request: Request[None, None, State]) -> Response[bytes]:
        return _answer(request, manifest().index)

    @get(f"{ASSET_PREFIX}/{{path:path}}", include_in_schema=False)
    async def asset(self, request: Request[None, None, State], path: str) -> Response[bytes]:
        found = manifest().find(path.removeprefix("/"))
        return not_found() if found is None else _answer(request, found)
