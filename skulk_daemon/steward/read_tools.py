"""The steward's read tools, run by the server for one investigation step.

Each tool answers a JSON text cut to :data:`~skulk_core.steward.tools.MAX_TOOL_RESULT_CHARS`
(the views are pure, in :mod:`skulk_core.steward.evidence`); node-targeted tools take a
unique live friendly name and refuse a missing or ambiguous one, and nothing a tool
returns carries a node id.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.diagnostics.bundle import NodeBundle
from skulk_core.ids import NodeId
from skulk_core.steward import evidence
from skulk_core.steward.tools import bounded
from skulk_daemon.diagnostics.service import DiagnosticsService
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import Node

MAX_DOC_HITS: Final = 3
MAX_DOC_SNIPPET_CHARS: Final = 500
_REPO: Final = Path(__file__).resolve().parents[2]
_WORD: Final = re.compile(r"[a-z0-9_]{3,}")


def _json(value: object) -> str:
    return msgspec.json.encode(value, enc_hook=str).decode()


@functools.cache
def _doc_paragraphs() -> tuple[tuple[str, str], ...]:
    """Skulk's own documentation shipped beside the code: (file, paragraph) pairs."""
    files = [_REPO / "README.md", *sorted((_REPO / "docs").glob("*.md"))]
    out: list[tuple[str, str]] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        for paragraph in re.split(r"\n\s*\n", text):
            if paragraph.strip():
                out.append((path.name, paragraph.strip()))
    return tuple(out)


def search_docs(query: str) -> str:
    terms = set(_WORD.findall(query.lower()))
    scored = []
    for name, paragraph in _doc_paragraphs():
        words = _WORD.findall(paragraph.lower())
        score = sum(1 for w in words if w in terms)
        if score:
            scored.append((score, name, paragraph))
    scored.sort(key=lambda hit: -hit[0])
    hits = [
        {"file": name, "text": bounded(paragraph, MAX_DOC_SNIPPET_CHARS)}
        for _, name, paragraph in scored[:MAX_DOC_HITS]
    ]
    return _json({"query": query, "hits": hits})


class ReadTools:
    """The read tools over one node's view (and its diagnostics service)."""

    def __init__(self, node: Node, diagnostics: DiagnosticsService | None) -> None:
        self._node = node
        self._diagnostics = diagnostics

    def names(self) -> dict[NodeId, str]:
        view = self._node.view()
        return evidence.node_names(view.state, view.telemetry)

    def cluster_state(self, *, internal: bool) -> str:
        view = self._node.view()
        return bounded(
            _json(
                evidence.cluster_state(view.state, view.telemetry, view.health, internal=internal)
            )
        )

    async def run(self, tool: str, arguments: dict[str, str], *, internal: bool) -> str:
        """The bounded result of one call; a refusal is a result the model reads."""
        try:
            return bounded(await self._run(tool, arguments, internal=internal))
        except ApiError as exc:
            return _json({"error": exc.message})

    async def _run(self, tool: str, arguments: dict[str, str], *, internal: bool) -> str:
        view = self._node.view()
        state, telemetry = view.state, view.telemetry
        match tool:
            case "get_cluster_state":
                return self.cluster_state(internal=internal)
            case "get_node_resources":
                return _json(evidence.node_resources(state, telemetry))
            case "get_telemetry":
                now = datetime.now(UTC)
                return _json(evidence.telemetry_view(state, telemetry, view.health, now))
            case "get_version_status":
                return _json(evidence.version_status(state, telemetry))
            case "get_performance_envelopes":
                return await self._envelopes()
            case "get_node_diagnostics" | "run_doctor":
                return await self._node_bundle(tool, arguments.get("node_name", ""))
            case "get_model_catalog":
                return _json(self._catalog())
            case "get_capability_nodes":
                return _json(evidence.capability_nodes(state, telemetry, datetime.now(UTC)))
            case "search_docs":
                return search_docs(arguments.get("query", ""))
            case _:
                return _json({"error": f"unknown tool {tool!r}"})

    def _catalog(self) -> dict[str, object]:
        placed = {i.shard_assignments.model_id for i in self._node.state.instances.values()}
        models = [
            {
                "id": str(entry.card.model_id),
                "tasks": [str(t) for t in entry.card.tasks],
                "placed": entry.card.model_id in placed,
            }
            for entry in self._node.catalog().entries()
        ]
        return {"count": len(models), "models": models[:40]}

    async def _envelopes(self) -> str:
        if self._diagnostics is None:
            return _json({"error": "performance envelopes are not available on this node"})
        names = self.names()
        report = await self._diagnostics.cluster_performance_envelopes()
        members = msgspec.to_builtins(report.nodes)
        for member in members:
            node = member.pop("nodeId", None) or member.pop("node_id", None)
            member["node"] = names.get(NodeId(str(node)), "unknown")
        return _json({"nodes": members})

    async def _node_bundle(self, tool: str, name: str) -> str:
        """The named node's bundle, its node ids (any node's) told as friendly names."""
        names = self.names()
        text = await self._bundle_text(tool, name, names)
        for node_id, friendly in names.items():
            text = text.replace(node_id, friendly)
        return text

    async def _bundle_text(self, tool: str, name: str, names: dict[NodeId, str]) -> str:
        target = evidence.resolve_node(name, names)
        if isinstance(target, evidence.Unresolved):
            return _json({"error": target.reason})
        if self._diagnostics is None:
            return _json({"error": "node diagnostics are not available on this node"})
        if target == self._node.node_id:
            bundle = await self._diagnostics.bundle({})
        else:
            bundle = await self._diagnostics.peer(
                target, "GET", "/v1/diagnostics/node", into=NodeBundle
            )
        doctor = [
            {"check": f.check_id, "verdict": str(f.verdict), "detail": f.detail[:200]}
            for f in bundle.doctor
        ]
        if tool == "run_doctor":
            failing = [f for f in doctor if f["verdict"] not in ("pass", "ok")]
            return _json({"node": name, "findings": len(doctor), "not_passing": failing[:12]})
        compact = msgspec.to_builtins(
            {
                "version": bundle.skulk_version,
                "runtime": bundle.runtime,
                "resources": bundle.resources,
                "placements": bundle.placements,
                "runners": bundle.supervisor_runners,
                "data_plane": bundle.data_plane,
            }
        )
        return _json({"node": name, **compact, "doctor": doctor[:12]})
