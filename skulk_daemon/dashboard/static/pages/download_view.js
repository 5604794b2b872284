// How one download is drawn on the Models and Downloads pages: a labelled <progress>,
// the bytes, the state and (while it moves) the speed. Server text as text nodes only.
import { formatBytes, h } from "../dom.js";
import { ACTIVE, percent, statusText, statusTone } from "./model_state.js";

export function formatSpeed(bytesPerSecond) {
  if (typeof bytesPerSecond !== "number" || !Number.isFinite(bytesPerSecond)) return "—";
  return `${formatBytes(bytesPerSecond)}/s`;
}

/** "1.2 MB of 3 MB (40%)" or the final state's words. */
export function progressText(row) {
  const pct = percent(row.done, row.total);
  if (row.status === "completed") return `${formatBytes(row.total || row.done)} downloaded`;
  if (!row.total) return statusText(row.status);
  return `${formatBytes(row.done)} of ${formatBytes(row.total)}${pct === null ? "" : ` (${pct}%)`}`;
}

/** The bar and its words for `row` (see model_state.readDownloads). */
export function progressBlock(row, speed, { withNode = true, withState = true } = {}) {
  const label = withNode ? `Download progress for ${row.modelId} on ${row.nodeName}` : `Download progress for ${row.modelId}`;
  const moving = ACTIVE.has(row.status);
  return h(
    "div",
    { class: "download-progress" },
    h("progress", {
      "aria-label": label,
      max: String(row.total || 1),
      value: String(row.status === "completed" ? row.total || 1 : Math.min(row.done, row.total || 0)),
    }),
    h(
      "span",
      { class: "download-words" },
      withState ? [h("span", { class: ["badge", statusTone(row.status)] }, statusText(row.status)), " "] : null,
      progressText(row),
      moving && speed ? ` · ${formatSpeed(speed)}` : "",
    ),
    row.error ? h("p", { class: "download-error" }, row.error) : null,
  );
}
