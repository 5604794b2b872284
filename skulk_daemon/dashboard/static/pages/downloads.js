// The Downloads page: every download the cluster reports in /state (per node: model,
// state, progress, speed worked out from successive snapshots), live from ctx.live,
// with Cancel (DELETE /download/{node}/{model}, partial files kept) and Retry
// (POST /download/start) where the API allows them; plus the model store's own
// transfers (GET /store/downloads) when a store is configured.
import { errorBox, formatBytes, h, replace } from "../dom.js";
import { formatSpeed, progressBlock } from "./download_view.js";
import { ACTIVE, RETRYABLE, createAnnouncer, createSpeedometer, readDownloads, statusText, statusTone } from "./model_state.js";

const STORE_POLL_MS = 4000;
const pathOf = (id) => id.split("/").map(encodeURIComponent).join("/");

export async function mount(root, ctx) {
  const notice = h("div", { class: "downloads-notice", role: "status", "aria-live": "polite" });
  const progressNews = h("p", { class: "sr-only", role: "status", "aria-live": "polite" });
  const body = h("tbody");
  const empty = h("p", { class: "muted" }, "Waiting for the cluster state…");
  const table = h(
    "table",
    { class: "instances downloads-table", "aria-label": "Downloads in the cluster" },
    h("thead", null, h("tr", null, ["Model", "Node", "State", "Progress", "Speed", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
    body,
  );
  const storeSection = h("section", { class: "store-downloads", "aria-labelledby": "store-downloads-heading" });
  replace(root, h("h1", null, "Downloads"), notice, progressNews, empty, h("div", { class: "table-wrap" }, table), storeSection);

  const speedometer = createSpeedometer();
  const announcer = createAnnouncer();
  const busy = new Set(); // row keys with a request in flight
  let lastState = null;

  async function act(row, kind) {
    busy.add(row.key);
    draw(lastState);
    try {
      if (kind === "cancel") {
        await ctx.api.del(`/download/${encodeURIComponent(row.nodeId)}/${pathOf(row.modelId)}`, { signal: ctx.signal });
        replace(notice, `Cancelled ${row.modelId} on ${row.nodeName}; the partial file is kept for a retry.`);
      } else {
        await ctx.api.post("/download/start", { target_node_id: row.nodeId, model_id: row.modelId }, { signal: ctx.signal });
        replace(notice, `Retrying ${row.modelId} on ${row.nodeName}.`);
      }
      ctx.live.refresh();
    } catch (error) {
      if (error.name === "AbortError") return;
      replace(notice, errorBox(`${kind === "cancel" ? "Cancel" : "Retry"} of ${row.modelId} on ${row.nodeName} refused: ${error.message}`));
    } finally {
      busy.delete(row.key);
      if (lastState) draw(lastState);
    }
  }

  function actions(row) {
    const cell = h("td", { class: "download-actions" });
    if (ACTIVE.has(row.status)) {
      cell.appendChild(h("button", { type: "button", disabled: busy.has(row.key), onClick: () => act(row, "cancel") }, `Cancel download of ${row.modelId} on ${row.nodeName}`));
    } else if (RETRYABLE.has(row.status)) {
      cell.appendChild(h("button", { type: "button", disabled: busy.has(row.key), onClick: () => act(row, "retry") }, `Retry download of ${row.modelId} on ${row.nodeName}`));
    }
    return cell;
  }

  function draw(state) {
    if (!state) return;
    const focusKey = document.activeElement?.textContent && table.contains(document.activeElement) ? document.activeElement.textContent : null;
    const rows = readDownloads(state).filter((r) => r.status !== "deleted");
    const speeds = speedometer.update(rows);
    const news = announcer.changes(rows);
    if (news.length) replace(progressNews, news.join(" "));
    replace(empty, rows.length ? "" : "No downloads in the cluster. Start one from Models.");
    empty.hidden = rows.length > 0;
    table.hidden = rows.length === 0;
    replace(
      body,
      rows.map((row) =>
        h(
          "tr",
          { "data-key": row.key },
          h("th", { scope: "row" }, row.modelId),
          h("td", null, row.nodeName),
          h("td", null, h("span", { class: ["badge", statusTone(row.status)] }, statusText(row.status))),
          h("td", null, progressBlock(row, null, { withState: false })),
          h("td", null, ACTIVE.has(row.status) ? formatSpeed(speeds.get(row.key)) : "—"),
          actions(row),
        ),
      ),
    );
    if (focusKey) [...body.querySelectorAll("button")].find((b) => b.textContent === focusKey)?.focus();
  }

  const unsubscribe = ctx.live.subscribe((state) => {
    lastState = state;
    draw(state);
  });

  // A store transfer: DELETE .../download cancels a pending or active one (partials
  // kept); POST .../download starts a failed or cancelled one again (the store
  // answers 200 with status "error" when it refuses, so the body is read).
  function storeAction(d) {
    const path = `/store/models/${pathOf(d.modelId)}/download`;
    const run = async (button, kind) => {
      button.disabled = true;
      try {
        const answer = kind === "cancel" ? await ctx.api.del(path, { signal: ctx.signal }) : await ctx.api.post(path, d.sourceRevision ? { source_revision: d.sourceRevision } : {}, { signal: ctx.signal });
        if (answer && answer.status === "error") throw new Error(answer.error || "the store refused");
        replace(notice, kind === "cancel" ? `Cancelled the store's transfer of ${d.modelId}; partial files are kept.` : `The store is fetching ${d.modelId} again.`);
        clearTimeout(storeTimer);
        pollStore();
      } catch (error) {
        if (error.name === "AbortError") return;
        replace(notice, errorBox(`The store refused: ${error.message}`));
        button.disabled = false;
      }
    };
    if (ACTIVE.has(d.status)) {
      const button = h("button", { type: "button" }, `Cancel store download of ${d.modelId}`);
      button.addEventListener("click", () => run(button, "cancel"));
      return button;
    }
    if (d.status === "failed" || d.status === "cancelled" || d.status === "error") {
      const button = h("button", { type: "button" }, `Retry store download of ${d.modelId}`);
      button.addEventListener("click", () => run(button, "retry"));
      return button;
    }
    return null;
  }

  // The store's own transfers: bounded polling with backoff, stopped when no store is configured.
  let storeTimer = null;
  let storeDelay = STORE_POLL_MS;
  async function pollStore() {
    try {
      const list = await ctx.api.get("/store/downloads", { signal: ctx.signal });
      storeDelay = STORE_POLL_MS;
      replace(
        storeSection,
        h("h2", { id: "store-downloads-heading" }, "Model store transfers"),
        list.length
          ? h(
              "ul",
              { class: "store-list", "aria-label": "Model store transfers" },
              list.map((d) =>
                h(
                  "li",
                  null,
                  h("strong", null, d.modelId),
                  " ",
                  h("span", { class: ["badge", statusTone(d.status)] }, d.status),
                  ` ${formatBytes(d.downloadedBytes)} of ${formatBytes(d.totalBytes)} (${Math.round((d.progress || 0) * 100)}%)`,
                  d.error ? h("p", { class: "download-error" }, d.error) : null,
                  storeAction(d),
                ),
              ),
            )
          : h("p", { class: "muted" }, "The store is fetching nothing."),
      );
    } catch (error) {
      if (error.name === "AbortError") return;
      if (error.status === 503) {
        replace(storeSection);
        return; // no store configured: nothing to poll
      }
      storeDelay = Math.min(storeDelay * 2, 30000);
      replace(storeSection, h("h2", { id: "store-downloads-heading" }, "Model store transfers"), errorBox(`The store could not be read: ${error.message}`));
    }
    if (!ctx.signal.aborted) storeTimer = setTimeout(pollStore, storeDelay);
  }
  pollStore();

  return () => {
    unsubscribe();
    clearTimeout(storeTimer);
  };
}
