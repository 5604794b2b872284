"""The client's calls to a node's steward routes (intelligent fabric)."""

from __future__ import annotations

from urllib.parse import quote

from skulk_cli.node_http import JsonObject, NodeHttp


class StewardCalls(NodeHttp):
    def steward_status(self) -> JsonObject:
        """``GET /v1/steward``: enabled, present, ready, models, transition, state."""
        return self._request("GET", "/v1/steward")

    def steward_proposals(self) -> JsonObject:
        """``GET /v1/steward/proposals``: the audit, newest first (operator authority)."""
        return self._request("GET", "/v1/steward/proposals")

    def decide_proposal(self, proposal_id: str, approved: bool) -> JsonObject:
        """``POST /v1/steward/proposals/{id}/decision``: one single-use decision."""
        path = f"/v1/steward/proposals/{quote(proposal_id, safe='')}/decision"
        return self._request("POST", path, body={"approved": approved})
