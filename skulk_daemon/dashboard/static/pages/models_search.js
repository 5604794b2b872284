// "Find Models": a debounced, cancellable search over GET /models/search, each result
// with its per-quant choices (GET /models/gguf-quants) and "Download {model_id}"
// (POST /models/add pinned to the chosen quant, then POST /download/start).
import { formatBytes, h, replace } from "../dom.js";

export const DEBOUNCE_MS = 300;
const LIMIT = 20;

function compact(n) {
  if (typeof n !== "number") return null;
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)}B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}K`;
  return String(n);
}

function facts(result) {
  const parts = [
    result.pipeline_tag,
    result.library_name,
    result.param_count ? `${compact(result.param_count)} params` : null,
    result.total_file_size ? formatBytes(result.total_file_size) : null,
    result.context_length ? `${result.context_length.toLocaleString()} ctx` : null,
    result.license ? `license ${result.license}` : null,
    typeof result.downloads === "number" ? `${compact(result.downloads)} downloads` : null,
    result.base_model_repo ? `${result.base_model_relation || "from"} ${result.base_model_repo}` : null,
  ].filter(Boolean);
  return parts.join(" · ");
}

/** Mounts the search into `section`; `shared` = {nodeId(), members(), onAdded(id)}. */
export function mountSearch(section, ctx, shared) {
  const inputId = "models-search";
  const input = h("input", { id: inputId, type: "search", autocomplete: "off", placeholder: "e.g. qwen3 gguf, or a file name ending in .gguf" });
  const status = h("p", { class: "muted search-status", role: "status", "aria-live": "polite" });
  const results = h("ul", { class: "search-results", "aria-label": "Search results" });
  let timer = null;
  let inflight = null;

  replace(
    section,
    h("h2", { id: "find-models" }, "Find Models"),
    h("p", { class: "muted" }, "Search Hugging Face through this node. Adding a model pins it to one commit; downloading fetches its bytes to a node."),
    h("div", { class: "search-row" }, h("label", { for: inputId }, "Search models"), input),
    status,
    results,
  );

  const run = async (text) => {
    if (inflight) inflight.abort();
    const controller = new AbortController();
    inflight = controller;
    ctx.signal.addEventListener("abort", () => controller.abort(), { once: true });
    replace(status, text ? `Searching for “${text}”…` : "Trending models…");
    try {
      const found = await ctx.api.get(`/models/search?query=${encodeURIComponent(text)}&limit=${LIMIT}`, { signal: controller.signal });
      if (controller !== inflight) return;
      replace(status, found.length ? `${found.length} result${found.length === 1 ? "" : "s"}${text ? ` for “${text}”` : ""}` : `No repositories match “${text}”.`);
      replace(results, found.map((result) => resultItem(result)));
    } catch (error) {
      if (error.name === "AbortError") return;
      replace(status);
      const reason = error.status === 502 || error.status === 0 ? "Hugging Face could not be reached from this node" : "The search failed";
      replace(results, h("li", null, h("div", { class: "error-box", role: "alert" }, h("p", null, `${reason}: ${error.message}`), h("button", { type: "button", onClick: () => run(text) }, "Retry"))));
    } finally {
      if (inflight === controller) inflight = null;
    }
  };

  input.addEventListener("input", () => {
    clearTimeout(timer);
    const text = input.value.trim();
    if (!text) {
      if (inflight) inflight.abort();
      replace(status);
      replace(results);
      return;
    }
    timer = setTimeout(() => run(text), DEBOUNCE_MS);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      clearTimeout(timer);
      run(input.value.trim());
    } else if (event.key === "Escape" && inflight) {
      inflight.abort();
      replace(status, "Search cancelled.");
    }
  });

  function resultItem(result) {
    const headingId = `result-${result.id.replace(/[^A-Za-z0-9_-]/g, "-")}`;
    const selectId = `${headingId}-quant`;
    const nodeSelectId = `${headingId}-node`;
    const quantSlot = h("div", { class: "quant-slot" }, h("p", { class: "muted" }, "Reading quantizations…"));
    const nodeSelect = h(
      "select",
      { id: nodeSelectId },
      shared.members().map(([id, name]) => h("option", { value: id, selected: id === shared.nodeId() }, id === shared.nodeId() ? `${name} (this node)` : name)),
    );
    const outcome = h("div", { class: "result-outcome", "aria-live": "polite" });
    const download = h("button", { type: "button", class: "primary" }, `Download ${result.id}`);
    let quantSelect = null;

    download.addEventListener("click", async () => {
      download.disabled = true;
      const ggufFile = quantSelect ? quantSelect.value || null : result.matched_file || null;
      replace(outcome, `Adding ${result.id}…`);
      try {
        await ctx.api.post("/models/add", { model_id: result.id, gguf_file: ggufFile }, { signal: ctx.signal });
        replace(outcome, `Starting the download of ${result.id}…`);
        await ctx.api.post("/download/start", { target_node_id: nodeSelect.value, model_id: result.id }, { signal: ctx.signal });
        replace(outcome, `Downloading ${result.id}: progress shows in the catalog below and on Downloads.`);
        ctx.live.refresh();
        shared.onAdded(result.id);
      } catch (error) {
        if (error.name === "AbortError") return;
        replace(outcome, h("div", { class: "error-box", role: "alert" }, h("p", null, `Download of ${result.id} refused: ${error.message}`)));
      } finally {
        download.disabled = false;
      }
    });

    const loadQuants = async () => {
      try {
        const answer = await ctx.api.get(`/models/gguf-quants?model_id=${encodeURIComponent(result.id)}`, { signal: ctx.signal });
        const options = answer.options || [];
        if (!options.length) {
          quantSelect = null;
          replace(quantSlot, h("p", { class: "muted" }, "Not a GGUF repository: the whole model downloads."));
          return;
        }
        const preferred = result.matched_file && options.some((o) => o.gguf_file === result.matched_file) ? result.matched_file : null;
        quantSelect = h(
          "select",
          { id: selectId },
          options.map((o) => h("option", { value: o.gguf_file, selected: o.gguf_file === preferred }, `${o.label} · ${formatBytes(o.total_bytes)}${o.shard_count > 1 ? ` · ${o.shard_count} files` : ""}`)),
        );
        replace(quantSlot, h("label", { for: selectId }, `Quantization for ${result.id}`), quantSelect);
      } catch (error) {
        if (error.name === "AbortError") return;
        replace(quantSlot, h("p", { class: "download-error", role: "alert" }, `Quantizations unavailable: ${error.message}`), h("button", { type: "button", onClick: loadQuants }, "Retry"));
      }
    };
    loadQuants();

    return h(
      "li",
      null,
      h(
        "article",
        { class: "result", "aria-labelledby": headingId },
        h("h3", { id: headingId }, result.id),
        h("p", { class: "muted result-facts" }, facts(result)),
        result.gated ? h("p", { class: "badge warn" }, "gated: accept the terms on Hugging Face and configure a token") : null,
        result.matched_file ? h("p", null, "Matched file ", h("code", null, result.matched_file)) : null,
        quantSlot,
        h("div", { class: "result-actions" }, h("label", { for: nodeSelectId }, "Download to"), nodeSelect, download),
        outcome,
      ),
    );
  }

  return () => {
    clearTimeout(timer);
    if (inflight) inflight.abort();
  };
}
