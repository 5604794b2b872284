// Pure reading for the Models and Downloads pages: /state downloads, placed models,
// member names, transfer speed and the catalog's companion badges. No DOM here.
import { readCluster } from "./cluster_model.js";

/** Download states that are still moving (cancel applies); the rest are final. */
export const ACTIVE = new Set(["pending", "in_progress"]);
/** Final states a download can be started again from. */
export const RETRYABLE = new Set(["failed", "cancelled"]);

const STATUS_TEXT = {
  pending: "queued",
  in_progress: "downloading",
  completed: "completed",
  failed: "failed",
  cancelled: "cancelled",
  deleted: "deleted",
};
const STATUS_TONE = { completed: "ok", failed: "bad", cancelled: "warn", in_progress: "", pending: "" };

export const statusText = (status) => STATUS_TEXT[status] || String(status || "unknown");
export const statusTone = (status) => STATUS_TONE[status] ?? "";

/** node id -> its friendly name (or a short id when it has none). */
export function nodeNames(state) {
  const names = new Map();
  for (const id of [...(state?.topology?.nodes || []), ...Object.keys(state?.nodeIdentities || {})]) {
    names.set(id, state?.nodeIdentities?.[id]?.friendlyName || id.slice(0, 12));
  }
  return names;
}

/** Every download the cluster reports: [{nodeId, nodeName, modelId, status, done, total, error}]. */
export function readDownloads(state) {
  const names = nodeNames(state);
  const rows = [];
  for (const [nodeId, reports] of Object.entries(state?.downloads || {})) {
    for (const report of reports || []) {
      rows.push({
        key: `${nodeId}\u0000${report.modelId}`,
        nodeId,
        nodeName: names.get(nodeId) || nodeId.slice(0, 12),
        modelId: report.modelId,
        status: report.status,
        done: report.downloadedBytes || 0,
        total: report.totalBytes || 0,
        error: report.errorMessage || null,
      });
    }
  }
  rows.sort((a, b) => Number(ACTIVE.has(b.status)) - Number(ACTIVE.has(a.status)) || a.modelId.localeCompare(b.modelId) || a.nodeName.localeCompare(b.nodeName));
  return rows;
}

/** model id -> [{instanceId, runners}] for every placed instance. */
export function placedModels(state) {
  const placed = new Map();
  if (!state) return placed;
  for (const instance of readCluster(state).instances) {
    if (!placed.has(instance.modelId)) placed.set(instance.modelId, []);
    placed.get(instance.modelId).push(instance);
  }
  return placed;
}

/** "ready" when every runner of some instance is ready, else the first runner's status. */
export function placedStatus(instances) {
  if (!instances || !instances.length) return null;
  for (const instance of instances) {
    if (instance.runners.length && instance.runners.every((r) => r.status === "ready" || r.status === "running")) return "ready";
  }
  const first = instances[0].runners[0];
  return first ? first.status : "placing";
}

/** Bytes per second per download, from successive snapshots (the API reports bytes, not speed). */
export function createSpeedometer(windowMs = 8000) {
  const samples = new Map(); // key -> [{t, done}]
  return {
    /** Records the rows' byte counts at `now`; returns key -> bytes/s (null until known). */
    update(rows, now = Date.now()) {
      const speeds = new Map();
      const seen = new Set();
      for (const row of rows) {
        seen.add(row.key);
        const list = samples.get(row.key) || [];
        if (!list.length || list[list.length - 1].done !== row.done || now - list[list.length - 1].t > 1000) list.push({ t: now, done: row.done });
        while (list.length > 2 && now - list[0].t > windowMs) list.shift();
        samples.set(row.key, list);
        const first = list[0];
        const last = list[list.length - 1];
        const seconds = (last.t - first.t) / 1000;
        speeds.set(row.key, ACTIVE.has(row.status) && seconds > 0 ? Math.max(0, (last.done - first.done) / seconds) : null);
      }
      for (const key of samples.keys()) if (!seen.has(key)) samples.delete(key);
      return speeds;
    },
  };
}

const COMPANION_FIELDS = [
  ["mtp_sidecar_repo", "Sidecar"],
  ["assistant_model_repo", "Drafter"],
  ["served_spec_draft_repo", "Drafter"],
  ["vllm_spec_draft_repo", "Drafter"],
];

/** repo -> {badge, owner} for every catalog entry another entry names as its companion. */
export function companionsOf(models) {
  const companions = new Map();
  for (const model of models) {
    for (const [field, badge] of COMPANION_FIELDS) {
      const repo = model.runtime?.[field];
      if (repo && !companions.has(repo)) companions.set(repo, { badge, owner: model.id });
    }
  }
  return companions;
}

/** Whether a catalog model can be chatted with (a text model). */
export const chats = (model) => (model.capabilities || []).includes("text");

/** 42% of a download, or null when its size is unknown. */
export function percent(done, total) {
  if (!total) return null;
  return Math.min(100, Math.floor((done / total) * 100));
}

/** Tracks each download's state and says, once, when one changes (for an aria-live
 * announcement: the bars themselves redraw every poll and are not announced). */
export function createAnnouncer() {
  const last = new Map();
  let primed = false;
  return {
    /** The sentences for what changed since the previous call (none the first time). */
    changes(rows) {
      const said = [];
      for (const row of rows) {
        const before = last.get(row.key);
        if (primed && before !== row.status) said.push(`Download of ${row.modelId} on ${row.nodeName}: ${statusText(row.status)}.`);
        last.set(row.key, row.status);
      }
      primed = true;
      return said;
    },
  };
}
