// The Models page ("Find Models", at /catalog because GET /models is the API's
// catalog): the catalog from /v1/models (+ /store/registry when a store is
// configured) with derived tags and companion badges, installed and placed state and
// live download progress from ctx.live (/state); the Hugging Face search
// (models_search.js); Launch and Delete dialogs (models_dialogs.js); local import.
import { errorBox, formatBytes, h, replace } from "../dom.js";
import { progressBlock } from "./download_view.js";
import { chats, companionsOf, createAnnouncer, createSpeedometer, nodeNames, placedModels, placedStatus, readDownloads } from "./model_state.js";
import { openDelete, openLaunch } from "./models_dialogs.js";
import { mountSearch } from "./models_search.js";

const slug = (id) => id.replace(/[^A-Za-z0-9_-]/g, "-");

export async function mount(root, ctx) {
  const notice = h("div", { class: "models-notice", role: "status", "aria-live": "polite" });
  const progressNews = h("p", { class: "sr-only", role: "status", "aria-live": "polite" });
  const searchSection = h("section", { class: "panel models-search", "aria-labelledby": "find-models" });
  const catalogList = h("ul", { class: "catalog", "aria-label": "Model catalog" });
  const catalogStatus = h("div", { class: "catalog-status" });
  const storeNote = h("p", { class: "muted store-note" });
  const importSection = h("section", { class: "panel models-import", "aria-labelledby": "import-models" });
  replace(
    root,
    h("h1", null, "Models"),
    notice,
    progressNews,
    searchSection,
    h("section", { class: "models-catalog", "aria-labelledby": "catalog-heading" }, h("h2", { id: "catalog-heading" }, "Catalog"), storeNote, catalogStatus, catalogList),
    importSection,
  );

  let nodeId = null;
  let models = [];
  let store = null; // model id -> registry entry, or null without a store
  let lastState = ctx.live.state;
  const speedometer = createSpeedometer();
  const announcer = createAnnouncer();
  const cards = new Map(); // model id -> {dynamic, model}
  const refetched = new Set();

  const say = (text) => replace(notice, text);

  const loadCatalog = async () => {
    try {
      const [list, id] = await Promise.all([ctx.api.get("/v1/models", { signal: ctx.signal }), nodeId ? nodeId : ctx.api.get("/node_id", { signal: ctx.signal })]);
      nodeId = id;
      models = list.data || [];
      replace(catalogStatus);
      drawCatalog();
    } catch (error) {
      if (error.name === "AbortError") return;
      replace(catalogStatus, errorBox(`The catalog could not be read: ${error.message}`, loadCatalog));
    }
    try {
      const registry = await ctx.api.get("/store/registry", { signal: ctx.signal });
      store = new Map((registry.entries || []).map((e) => [e.model_id, e]));
      replace(storeNote, `Model store: ${store.size} model${store.size === 1 ? "" : "s"} held, copies seen on ${registry.cache_inventory?.observed_nodes ?? 0} of ${registry.cache_inventory?.expected_nodes ?? 0} nodes (${registry.cache_inventory?.coverage || "unknown"}).`);
      drawCatalog();
    } catch (error) {
      if (error.name === "AbortError") return;
      store = null;
      replace(storeNote, error.status === 503 ? "No model store is configured: each node keeps its own downloads." : `The model store could not be read: ${error.message}`);
    }
  };

  function badgesFor(model, companion) {
    const tags = (model.tags || []).map((tag) => h("span", { class: ["badge", "tag", `tag-${tag}`], title: (model.capabilities || []).join(", ") }, tag));
    return h(
      "p",
      { class: "badges", "aria-label": `Tags for ${model.id}` },
      tags,
      companion ? h("span", { class: "badge companion", title: `Loaded with ${companion.owner}` }, companion.badge) : null,
      model.quantization ? h("span", { class: "badge" }, model.quantization) : null,
      h("span", { class: "badge", title: "Where the card comes from" }, `${model.catalog_source} card`),
      model.update_available ? h("span", { class: "badge warn" }, "update available") : null,
      (model.advisories || []).length ? h("span", { class: "badge bad" }, `${model.advisories.length} advisory`) : null,
    );
  }

  function drawCatalog() {
    const focusKey = document.activeElement?.dataset?.focusKey || null;
    const companions = companionsOf(models);
    cards.clear();
    const sorted = [...models].sort((a, b) => Number(b.installed) - Number(a.installed) || a.id.localeCompare(b.id));
    replace(
      catalogList,
      sorted.length ? sorted.map((model) => card(model, companions.get(model.id) || companions.get(model.artifact_repository))) : h("li", { class: "muted" }, "The catalog is empty: search Hugging Face above to add a model."),
    );
    if (lastState) drawLive(lastState);
    if (focusKey) catalogList.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`)?.focus();
  }

  function card(model, companion) {
    const headingId = `model-${slug(model.id)}`;
    const dynamic = h("div", { class: "model-live" });
    const actions = h("div", { class: "model-actions" });
    const held = store?.get(model.id);
    const button = (label, onClick, extra = {}) => h("button", { type: "button", "data-focus-key": label, onClick, ...extra }, label);
    if (!companion) {
      if (!model.installed) actions.appendChild(button(`Download ${model.id}`, () => startDownload(model), { class: "primary" }));
      actions.appendChild(button(`Launch ${model.id}`, () => openLaunch(root, ctx, model, { onPlaced: (a) => say(`Placement of ${model.id} accepted as instance ${a.instance_id}.`) })));
      if (chats(model)) actions.appendChild(button(`Chat with ${model.id}`, () => ctx.navigate(`/chat?model=${encodeURIComponent(model.id)}`)));
    }
    if (model.installed || model.catalog_source === "custom") {
      actions.appendChild(button(`Delete ${model.id}`, () => openDelete(root, ctx, model, { nodeId, onDeleted: (what) => { say(what === "card" ? `Removed the card of ${model.id}.` : `Deleted the files of ${model.id}.`); loadCatalog(); } }), { class: "danger" }));
    }
    cards.set(model.id, { dynamic, model });
    return h(
      "li",
      null,
      h(
        "article",
        { class: ["model", model.installed && "installed"], "aria-labelledby": headingId },
        h("div", { class: "model-head" }, h("h3", { id: headingId }, model.id), h("span", { class: ["badge", model.installed ? "ok" : ""] }, model.installed ? "installed" : "not downloaded")),
        model.name && model.name !== model.id ? h("p", { class: "muted" }, model.name) : null,
        badgesFor(model, companion),
        h(
          "dl",
          { class: "facts" },
          h("dt", null, "Size"),
          h("dd", null, formatBytes(model.storage_size_bytes)),
          model.context_length ? [h("dt", null, "Context"), h("dd", null, `${model.context_length.toLocaleString()} tokens`)] : null,
          model.architecture ? [h("dt", null, "Architecture"), h("dd", null, model.architecture)] : null,
          model.artifact_file ? [h("dt", null, "File"), h("dd", null, h("code", null, model.artifact_file))] : null,
          held ? [h("dt", null, "Store"), h("dd", null, `${held.reconciliation_state}, copies on ${(held.cached_on_nodes || []).length} node(s)`)] : null,
          companion ? [h("dt", null, "Companion of"), h("dd", null, companion.owner)] : null,
        ),
        dynamic,
        actions,
      ),
    );
  }

  async function startDownload(model) {
    say(`Starting the download of ${model.id}…`);
    try {
      await ctx.api.post("/download/start", { target_node_id: nodeId, model_id: model.id }, { signal: ctx.signal });
      say(`Downloading ${model.id}.`);
      ctx.live.refresh();
    } catch (error) {
      if (error.name === "AbortError") return;
      replace(notice, errorBox(`Download of ${model.id} refused: ${error.message}`));
    }
  }

  function drawLive(state) {
    const placed = placedModels(state);
    const rows = readDownloads(state);
    const speeds = speedometer.update(rows);
    const news = announcer.changes(rows);
    if (news.length) replace(progressNews, news.join(" "));
    const names = nodeNames(state);
    // A download that completed (or bytes deleted) changes "installed": read the catalog again, once per change.
    let refetch = false;
    for (const row of rows) {
      const model = cards.get(row.modelId)?.model;
      const stale = model && ((row.status === "completed" && !model.installed) || (row.status === "deleted" && model.installed));
      const mark = `${row.key}\u0000${row.status}`;
      if (stale && !refetched.has(mark)) {
        refetched.add(mark);
        refetch = true;
      }
    }
    for (const [id, { dynamic }] of cards) {
      const instances = placed.get(id);
      const runnerStatus = placedStatus(instances);
      const mine = rows.filter((r) => r.modelId === id && r.status !== "deleted");
      replace(
        dynamic,
        runnerStatus
          ? h("p", { class: "placed" }, h("span", { class: ["badge", runnerStatus === "ready" ? "ok" : ""] }, `placed · ${runnerStatus}`), " on ", [...new Set(instances.flatMap((i) => i.runners.map((r) => names.get(r.nodeId) || r.nodeId)))].join(", "))
          : null,
        mine.map((row) => progressBlock(row, speeds.get(row.key))),
      );
    }
    if (refetch) loadCatalog();
  }

  const unsubscribe = ctx.live.subscribe((state) => {
    lastState = state;
    drawLive(state);
  });

  const stopSearch = mountSearch(searchSection, ctx, {
    nodeId: () => nodeId,
    // Before the first /state arrives, this node is the only choice.
    members: () => {
      const known = [...nodeNames(ctx.live.state).entries()];
      return known.length || !nodeId ? known : [[nodeId, "this node"]];
    },
    onAdded: () => loadCatalog(),
  });
  mountImport(importSection, ctx, () => loadCatalog());
  await loadCatalog();

  return () => {
    unsubscribe();
    stopSearch();
  };
}

/** A GGUF already on this machine: POST /models/import (hard link, hashed), and the
 * store's reconciliation imports when a store is configured. */
function mountImport(section, ctx, onImported) {
  const pathId = "import-path";
  const idId = "import-id";
  const path = h("input", { id: pathId, type: "text", autocomplete: "off", placeholder: "/path/to/model.gguf" });
  const modelId = h("input", { id: idId, type: "text", autocomplete: "off", placeholder: "local/my-model (optional)" });
  const outcome = h("div", { "aria-live": "polite" });
  const reconciliation = h("p", { class: "muted" });
  const submit = h("button", { type: "submit" }, "Import file");
  const form = h(
    "form",
    { class: "import-form" },
    h("label", { for: pathId }, "GGUF file path on this node"),
    path,
    h("label", { for: idId }, "Model id"),
    modelId,
    submit,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!path.value.trim()) {
      replace(outcome, h("p", { role: "alert", class: "download-error" }, "Give the path of a .gguf file on this node."));
      return;
    }
    submit.disabled = true;
    replace(outcome, "Importing (hashing the file)…");
    try {
      const body = { path: path.value.trim(), model_id: modelId.value.trim() || null };
      const done = await ctx.api.post("/models/import", body, { signal: ctx.signal });
      replace(outcome, h("p", null, `Imported ${done.model_id} (${formatBytes(done.size_bytes)}, sha256 `, h("code", null, done.sha256), ")."));
      onImported();
    } catch (error) {
      if (error.name === "AbortError") return;
      const help = error.status === 403 ? " Importing reads a file on this machine, so only a browser on the node itself (localhost) may do it." : "";
      replace(outcome, h("div", { class: "error-box", role: "alert" }, h("p", null, `Import refused: ${error.message}${help}`)));
    } finally {
      submit.disabled = false;
    }
  });
  replace(section, h("h2", { id: "import-models" }, "Import a local GGUF"), form, outcome, reconciliation);
  ctx.api
    .get("/store/reconciliation", { signal: ctx.signal })
    .then((r) =>
      replace(
        reconciliation,
        `Store imports from node caches: ${r.state}${r.inventory_only ? " (inventory only)" : ""}${r.disabled_reason ? ` (${r.disabled_reason})` : ""}; ${r.discovered} found, ${r.imported} imported, ${(r.pending || []).length} pending, ${(r.failures || []).length} failed.`,
      ),
    )
    .catch(() => replace(reconciliation));
}
