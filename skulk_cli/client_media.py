"""The client's calls to a node's media job routes (``/v1/videos*``, ``/v1/music*``).
Jobs belong to the node that accepted them, so every call goes to that node."""

from __future__ import annotations

from typing import IO, Literal
from urllib.parse import quote

from skulk_cli.node_http import JsonObject, NodeHttp

Family = Literal["videos", "music"]


class MediaCalls(NodeHttp):
    def create_job(
        self,
        family: Family,
        body: JsonObject,
        files: dict[str, tuple[str, bytes | IO[bytes]]] | None = None,
    ) -> JsonObject:
        """``POST /v1/videos`` or ``/v1/music``: the queued job. With ``files`` the
        body's fields travel as a multipart form beside them (a video's keyframes)."""
        if files:
            fields = {name: str(value) for name, value in body.items() if value is not None}
            response = self._raw("POST", f"/v1/{family}", data=fields, files=files)
            answer: JsonObject = response.json()
            return answer
        return self._request("POST", f"/v1/{family}", body=body)

    def job(self, family: Family, job_id: str) -> JsonObject:
        return self._request("GET", f"/v1/{family}/{quote(job_id, safe='')}")

    def cancel_job(self, family: Family, job_id: str) -> JsonObject:
        return self._request("POST", f"/v1/{family}/{quote(job_id, safe='')}/cancel")

    def job_content(self, family: Family, job_id: str, variant: str | None = None) -> bytes:
        """A completed job's file (``variant`` for a video's thumbnail)."""
        path = f"/v1/{family}/{quote(job_id, safe='')}/content"
        if variant is not None:
            path += f"?variant={quote(variant, safe='')}"
        return self._raw("GET", path).content
