"""The client's calls to a node's plugin routes (owner authority: the dashboard's
marker on a direct client, the bearer on a paired one)."""

from __future__ import annotations

from urllib.parse import quote

from skulk_cli.node_http import JsonObject, NodeHttp


class PluginCalls(NodeHttp):
    def plugins(self) -> JsonObject:
        """``GET /v1/plugins``: installed plugins and their nodes (``plugins:read``)."""
        return self._request("GET", "/v1/plugins", headers=self._owner_headers)

    def host_network(self) -> JsonObject:
        """``GET /v1/plugins/host-network``: this node's live fabric listeners, node id,
        network version and namespace fingerprint (``plugins:read``)."""
        return self._request("GET", "/v1/plugins/host-network", headers=self._owner_headers)

    def managed_plugin(self, plugin_id: str) -> JsonObject:
        """``GET /v1/plugins/managed/installations/{plugin_id}``: one installation."""
        path = f"/v1/plugins/managed/installations/{quote(plugin_id, safe='')}"
        return self._request("GET", path, headers=self._owner_headers)

    def submit_plugin_operation(self, plugin_id: str, body: JsonObject) -> JsonObject:
        """``POST .../installations/{plugin_id}/operations`` (``plugins:manage``)."""
        path = f"/v1/plugins/managed/installations/{quote(plugin_id, safe='')}/operations"
        return self._request("POST", path, body=body, headers=self._owner_headers)

    def plugin_operation(self, plugin_id: str, operation_id: str) -> JsonObject:
        """``GET .../installations/{plugin_id}/operations/{operation_id}``."""
        path = (
            f"/v1/plugins/managed/installations/{quote(plugin_id, safe='')}"
            f"/operations/{quote(operation_id, safe='')}"
        )
        return self._request("GET", path, headers=self._owner_headers)

    def plugin_node(
        self, plugin_id: str, node_id: str, facet: str, body: JsonObject | None = None
    ) -> JsonObject:
        """``GET`` (or, with ``body``, ``POST``) ``/v1/plugins/{plugin}/nodes/{node}/{facet}``:
        a node's ``configuration`` or ``credentials``."""
        path = f"/v1/plugins/{quote(plugin_id, safe='')}/nodes/{quote(node_id, safe='')}/{facet}"
        method = "GET" if body is None else "POST"
        return self._request(method, path, body=body, headers=self._owner_headers)
