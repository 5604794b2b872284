"""The client's calls for a node's operational jobs: store transfers, storage and
reconciliation, runner cancel, telemetry, performance envelopes, connectivity, and
the plugin owner's proposals, setup operations and grants."""

from __future__ import annotations

from urllib.parse import quote

from skulk_cli.node_http import STORE_TIMEOUT_SECONDS, JsonObject, NodeHttp


def _store_model_path(model_id: str, suffix: str) -> str:
    """``/store/models/<id><suffix>``: the id raw (its ``/`` unescaped), a ``.`` or
    ``..`` part escaped so the HTTP client does not resolve it away."""
    parts = model_id.split("/")
    escaped = [p.replace(".", "%2E") if p in (".", "..") else quote(p, safe="") for p in parts]
    return "/store/models/" + "/".join(escaped) + suffix


def _plugin_node(plugin_id: str, node_id: str, facet: str) -> str:
    return f"/v1/plugins/{quote(plugin_id, safe='')}/nodes/{quote(node_id, safe='')}/{facet}"


class OpsCalls(NodeHttp):
    # -- the model store ----------------------------------------------------------------

    def start_store_download(self, model_id: str, body: JsonObject) -> JsonObject:
        """``POST /store/models/{id}/download``: the store's download, as it stands."""
        path = _store_model_path(model_id, "/download")
        return self._request("POST", path, body, timeout=STORE_TIMEOUT_SECONDS)

    def cancel_store_download(self, model_id: str) -> JsonObject:
        """``DELETE /store/models/{id}/download``: 409 when nothing is cancellable."""
        path = _store_model_path(model_id, "/download")
        return self._request("DELETE", path, timeout=STORE_TIMEOUT_SECONDS)

    def store_download_status(self, model_id: str) -> JsonObject:
        """``GET /store/models/{id}/download/status``."""
        path = _store_model_path(model_id, "/download/status")
        return self._request("GET", path, timeout=STORE_TIMEOUT_SECONDS)

    def storage(self) -> JsonObject:
        """``GET /store/storage``: this node's artifacts and free disk (always answers)."""
        return self._request("GET", "/store/storage", timeout=STORE_TIMEOUT_SECONDS)

    def reconciliation(self) -> JsonObject:
        """``GET /store/reconciliation``: what the store host's last pass found."""
        return self._request("GET", "/store/reconciliation", timeout=STORE_TIMEOUT_SECONDS)

    def rescan_reconciliation(self) -> JsonObject:
        """``POST /store/reconciliation/rescan`` (from the store host's machine only)."""
        return self._request(
            "POST", "/store/reconciliation/rescan", {}, timeout=STORE_TIMEOUT_SECONDS
        )

    # -- diagnostics --------------------------------------------------------------------

    def cancel_runner_task(
        self, runner_id: str, task_id: str | None, node_id: str | None = None
    ) -> JsonObject:
        """``POST /v1/diagnostics/{node|cluster/<node>}/runners/{id}/cancel``."""
        where = "node" if node_id is None else f"cluster/{quote(node_id, safe='')}"
        path = f"/v1/diagnostics/{where}/runners/{quote(runner_id, safe='')}/cancel"
        body: JsonObject = {} if task_id is None else {"taskId": task_id}
        return self._request("POST", path, body)

    def telemetry_transport(self) -> JsonObject:
        """``GET /v1/diagnostics/telemetry``: the fabric telemetry transport's counters."""
        return self._request("GET", "/v1/diagnostics/telemetry")

    def telemetry_preview(self) -> JsonObject:
        """``GET /v1/telemetry/preview``: consent and the batch that would be sent next."""
        return self._request("GET", "/v1/telemetry/preview")

    def performance_envelopes(self, *, cluster: bool) -> JsonObject:
        """``GET /v1/diagnostics/performance-envelopes`` (``/cluster``: every member)."""
        suffix = "/cluster" if cluster else ""
        return self._request("GET", f"/v1/diagnostics/performance-envelopes{suffix}")

    # -- connectivity -------------------------------------------------------------------

    def remote_access(self) -> JsonObject:
        """``GET /v1/connectivity/remote-access``: LAN and tailnet URLs."""
        return self._request("GET", "/v1/connectivity/remote-access")

    def tailscale(self, node_id: str | None = None) -> JsonObject:
        """``GET /v1/connectivity/tailscale`` (``node_id``: another member's)."""
        params = None if node_id is None else (("node_id", node_id),)
        return self._request("GET", "/v1/connectivity/tailscale", params=params)

    # -- plugins: proposals, setup operations, grants -----------------------------------

    def plugin_proposals(self, plugin_id: str, node_id: str, offset: int) -> JsonObject:
        """``GET .../nodes/{node}/proposals?offset=``: a page of retained proposals."""
        path = _plugin_node(plugin_id, node_id, "proposals")
        return self._request(
            "GET", path, params=(("offset", str(offset)),), headers=self._owner_headers
        )

    def plugin_proposal(
        self, plugin_id: str, node_id: str, proposal_id: str, digest: str
    ) -> JsonObject:
        """``GET .../proposals/{id}?proposal_digest=``: a fresh review of one proposal."""
        path = _plugin_node(plugin_id, node_id, f"proposals/{quote(proposal_id, safe='')}")
        return self._request(
            "GET", path, params=(("proposal_digest", digest),), headers=self._owner_headers
        )

    def approve_plugin_proposal(
        self, plugin_id: str, node_id: str, proposal_id: str, body: JsonObject
    ) -> JsonObject:
        """``POST .../proposals/{id}/approve`` (``plugins:approve``)."""
        path = _plugin_node(plugin_id, node_id, f"proposals/{quote(proposal_id, safe='')}/approve")
        return self._request("POST", path, body, headers=self._owner_headers)

    def plugin_proposal_operation(
        self, plugin_id: str, node_id: str, operation_id: str
    ) -> JsonObject:
        """``GET .../proposal-operations/{id}``: observe one approval (never replays)."""
        facet = f"proposal-operations/{quote(operation_id, safe='')}"
        path = _plugin_node(plugin_id, node_id, facet)
        return self._request("GET", path, headers=self._owner_headers)

    def plugin_setup_actions(self, plugin_id: str, node_id: str) -> JsonObject:
        """``GET .../setup-actions``: installed setup actions and retained operations."""
        path = _plugin_node(plugin_id, node_id, "setup-actions")
        return self._request("GET", path, headers=self._owner_headers)

    def start_plugin_setup(self, plugin_id: str, node_id: str, body: JsonObject) -> JsonObject:
        """``POST .../setup-operations``: start one fenced setup action."""
        path = _plugin_node(plugin_id, node_id, "setup-operations")
        return self._request("POST", path, body, headers=self._owner_headers)

    def plugin_setup_operation(
        self, plugin_id: str, node_id: str, operation_id: str, *, resume: bool = False
    ) -> JsonObject:
        """``GET .../setup-operations/{id}`` (``resume``: ``POST .../resume``)."""
        facet = f"setup-operations/{quote(operation_id, safe='')}"
        if resume:
            path = _plugin_node(plugin_id, node_id, f"{facet}/resume")
            return self._request("POST", path, {}, headers=self._owner_headers)
        path = _plugin_node(plugin_id, node_id, facet)
        return self._request("GET", path, headers=self._owner_headers)

    def plugin_grants(self) -> JsonObject:
        """``GET /v1/auth/plugin-grants``: paired devices' plugin grants (direct owner)."""
        return self._request("GET", "/v1/auth/plugin-grants", headers=self._owner_headers)

    def put_plugin_grants(self, device_id: str, body: JsonObject) -> JsonObject:
        """``PUT /v1/auth/plugin-grants/{device_id}``: replace one device's grants."""
        path = f"/v1/auth/plugin-grants/{quote(device_id, safe='')}"
        return self._request("PUT", path, body, headers=self._owner_headers)
