// Pure reading of a /state document into what the Cluster page draws: no DOM here.

/** A tagged union as the API writes it ({"RunnerReady": {...}}): [tag, body]. */
export function untag(value) {
  if (!value || typeof value !== "object") return [null, null];
  const keys = Object.keys(value);
  return keys.length === 1 ? [keys[0], value[keys[0]]] : [null, value];
}

/** "RunnerWarmingUp" -> "warming up". */
export function runnerLabel(tag) {
  if (!tag) return "unknown";
  return tag.replace(/^Runner/, "").replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase();
}

const RUNNER_TONE = { RunnerReady: "ok", RunnerRunning: "ok", RunnerFailed: "bad", RunnerShutdown: "warn", RunnerShuttingDown: "warn" };

/** Satellites older than this are drawn muted (the spec's ninety seconds). */
export const SATELLITE_STALE_MS = 90_000;

const bytes = (m) => (m && typeof m.inBytes === "number" ? m.inBytes : null);

export function readCluster(state, now = Date.now()) {
  const ids = [...new Set([...(state.topology?.nodes || []), ...Object.keys(state.nodeIdentities || {})])];
  const master = state.masterNodeId || null;
  const runnersByNode = new Map(ids.map((id) => [id, []]));
  const instances = [];
  for (const [instanceId, tagged] of Object.entries(state.instances || {})) {
    const [kind, body] = untag(tagged);
    if (!body) continue;
    const assignments = body.shardAssignments || {};
    const runners = [];
    for (const [nodeId, runnerId] of Object.entries(assignments.nodeToRunner || {})) {
      const [shardKind, shard] = untag((assignments.runnerToShard || {})[runnerId]);
      const [statusTag, status] = untag((state.runners || {})[runnerId]);
      const runner = {
        runnerId,
        nodeId,
        instanceId,
        modelId: assignments.modelId,
        status: runnerLabel(statusTag),
        tone: RUNNER_TONE[statusTag] || "",
        error: status && typeof status.errorMessage === "string" ? status.errorMessage : null,
        rank: shard ? shard.deviceRank : null,
        worldSize: shard ? shard.worldSize : null,
        shardKind: shardKind ? shardKind.replace(/ShardMetadata$/, "") : null,
      };
      runners.push(runner);
      if (!runnersByNode.has(nodeId)) runnersByNode.set(nodeId, []);
      runnersByNode.get(nodeId).push(runner);
    }
    runners.sort((a, b) => (a.rank ?? 0) - (b.rank ?? 0));
    instances.push({ instanceId, kind: kind ? kind.replace(/Instance$/, "") : "instance", modelId: assignments.modelId, runners });
  }
  instances.sort((a, b) => String(a.modelId).localeCompare(String(b.modelId)));

  const members = ids.map((id) => {
    const identity = state.nodeIdentities?.[id] || null;
    const memory = state.nodeMemory?.[id] || null;
    const system = state.nodeSystem?.[id] || null;
    const resources = state.nodeResources?.[id] || null;
    const health = state.nodeHealth?.[id] || null;
    const total = bytes(memory?.ramTotal);
    const available = bytes(memory?.ramAvailable);
    const satellites = (state.capabilityNodes?.[id] || []).map((sat) => ({
      ...sat,
      stale: Number.isFinite(Date.parse(sat.observedAt)) && now - Date.parse(sat.observedAt) > SATELLITE_STALE_MS,
    }));
    return {
      id,
      name: identity?.friendlyName || system?.hostname || id.slice(0, 12),
      isMaster: id === master,
      role: id === master ? "master" : "member",
      participation: resources?.participation || null,
      version: identity?.skulkVersion || null,
      memoryTotal: total,
      memoryUsed: total !== null && available !== null ? Math.max(0, total - available) : null,
      accelerator: system?.accelerator || null,
      system,
      backends: resources?.backends || [],
      apiUrls: resources?.apiUrls || [],
      health: health?.level || "unknown",
      reasons: health?.reasons || [],
      capabilities: state.nodeCapabilities?.[id] || [],
      satellites,
      lastSeen: state.lastSeen?.[id] || null,
      runners: runnersByNode.get(id) || [],
    };
  });
  members.sort((a, b) => (a.isMaster === b.isMaster ? a.name.localeCompare(b.name) : a.isMaster ? -1 : 1));

  // Links: one per unordered pair; "session" when either side holds a live connection.
  const links = new Map();
  for (const c of state.topology?.connections || []) {
    const a = c.localNodeId;
    const b = c.sendBackNodeId;
    if (!a || !b || a === b) continue;
    const key = [a, b].sort().join("|");
    const prev = links.get(key);
    links.set(key, { a, b, session: Boolean(prev?.session || c.session) });
  }
  return { master, term: state.electionTerm ?? null, members, instances, links: [...links.values()] };
}
