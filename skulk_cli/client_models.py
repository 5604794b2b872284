"""The client's calls to a node's model routes: the catalog, Hugging Face, downloads,
and the model store (a store host answers slowly while it walks its disk)."""

from __future__ import annotations

from urllib.parse import quote

from skulk_cli.node_http import HUB_TIMEOUT_SECONDS, STORE_TIMEOUT_SECONDS, JsonObject, NodeHttp


class ModelCalls(NodeHttp):
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

    def gguf_quants(self, model_id: str) -> JsonObject:
        """``GET /models/gguf-quants``: a Hugging Face repository's GGUF quantizations."""
        return self._request(
            "GET",
            "/models/gguf-quants",
            params=(("model_id", model_id),),
            timeout=HUB_TIMEOUT_SECONDS,
        )

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

    def store_optimize(self, model_id: str, body: JsonObject) -> JsonObject:
        """``POST /store/models/{model_id}/optimize``: the started OptiQ job."""
        path = _store_model_path(model_id) + "/optimize"
        return self._request("POST", path, body, timeout=STORE_TIMEOUT_SECONDS)

    def store_optimize_status(self, model_id: str) -> JsonObject:
        """``GET /store/models/{model_id}/optimize/status``: the job's progress."""
        path = _store_model_path(model_id) + "/optimize/status"
        return self._request("GET", path, timeout=STORE_TIMEOUT_SECONDS)

    def purge_staging(self, model_id: str | None = None) -> JsonObject:
        body: JsonObject = {} if model_id is None else {"modelId": model_id}
        return self._request("POST", "/store/purge-staging", body, timeout=STORE_TIMEOUT_SECONDS)


def _store_model_path(model_id: str) -> str:
    """The id travels raw (its ``/`` unescaped), the rest of it escaped; a ``.`` or
    ``..`` part is escaped too, so the HTTP client does not resolve it away and the
    node refuses it by name."""
    parts = model_id.split("/")
    escaped = [p.replace(".", "%2E") if p in (".", "..") else quote(p, safe="") for p in parts]
    return "/store/models/" + "/".join(escaped)
