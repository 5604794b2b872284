// Performance (/performance): every member's observe-only performance envelopes
// (GET /v1/diagnostics/performance-envelopes/cluster, fanned out, unreachable members
// named): per (node, hardware class, model, engine, quantization), throughput and
// first-token latency against concurrency as a table and a small SVG chart, with the
// knee. Then the Capabilities panel (managed capability nodes from /state).
import { errorBox, h, replace } from "../dom.js";
import { capabilitiesPanel } from "./capabilities_panel.js";
import { envelopeChart } from "./perf_chart.js";

export const REFRESH_MS = 10000;
const ALL = "";

const num = (v, digits = 1) => (typeof v === "number" && Number.isFinite(v) ? v.toFixed(digits) : "—");

/** Every envelope of a cluster answer, with its node: [{nodeId, envelope}]. */
export function envelopeRows(answer) {
  const rows = [];
  for (const member of answer?.nodes || []) {
    if (!member.ok) continue;
    for (const envelope of member.envelopes || []) rows.push({ nodeId: member.nodeId, envelope });
  }
  return rows.sort((a, b) => a.envelope.modelId.localeCompare(b.envelope.modelId) || a.nodeId.localeCompare(b.nodeId));
}

function bucketTable(envelope, label) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "instances", "aria-label": label },
      h(
        "thead",
        null,
        h(
          "tr",
          null,
          ["Concurrency", "Requests", "Mean decode tok/s", "p50 decode tok/s", "Aggregate tok/s", "p50 first token", "p90 first token"].map((t) => h("th", { scope: "col" }, t)),
        ),
      ),
      h(
        "tbody",
        null,
        [...(envelope.buckets || [])]
          .sort((a, b) => a.concurrency - b.concurrency)
          .map((b) =>
            h(
              "tr",
              { class: envelope.kneeConcurrency === b.concurrency ? "knee-row" : null },
              h("th", { scope: "row" }, String(b.concurrency), envelope.kneeConcurrency === b.concurrency ? h("span", { class: "badge" }, "knee") : null),
              h("td", null, String(b.requests)),
              h("td", null, num(b.meanDecodeTps)),
              h("td", null, num(b.p50DecodeTps)),
              h("td", null, num(b.aggregateDecodeTps)),
              h("td", null, `${num(b.p50TtftMs, 0)} ms`),
              h("td", null, `${num(b.p90TtftMs, 0)} ms`),
            ),
          ),
      ),
    ),
  );
}

function envelopeCard({ nodeId, envelope }, nodeName, index) {
  const where = `${envelope.modelId} on ${nodeName(nodeId)}`;
  const id = `envelope-${index}`;
  const knee = envelope.kneeConcurrency;
  return h(
    "section",
    { class: "panel envelope", "aria-labelledby": id },
    h("h2", { id }, where),
    h(
      "dl",
      { class: "facts" },
      [
        ["Engine", envelope.engine],
        ["Quantization", envelope.quantization],
        ["Hardware class", envelope.hardwareClass],
        ["Samples", String(envelope.samples)],
        ["Knee", knee != null ? `aggregate throughput stops rising past concurrency ${knee}` : "not reached yet: throughput still rises with concurrency (or too few levels seen)"],
      ].map(([k, v]) => [h("dt", null, k), h("dd", null, v)]),
    ),
    envelopeChart(envelope, `Throughput and first-token latency against concurrency for ${where}`),
    bucketTable(envelope, `Performance envelope of ${where}`),
  );
}

function emptyState() {
  return h(
    "div",
    { class: "empty" },
    h("p", null, "No performance data yet. Envelopes build up from real requests: each member records the requests it serves (nothing is sampled in the background)."),
    h(
      "ul",
      null,
      h("li", null, "Serve a few requests: chat on the ", h("a", { href: "/chat" }, "Chat page"), " or from any API client."),
      h("li", null, "Or run ", h("code", null, "skulk bench <model> --runs 5"), " against a placed model; several clients at once fill in higher concurrency."),
    ),
  );
}

/** The cluster's envelopes; where the fan-out route fails (a node that predates it, a
 * fan-out error), this node's own, shaped the same, with a note saying so. */
async function readEnvelopes(ctx) {
  try {
    return [await ctx.api.get("/v1/diagnostics/performance-envelopes/cluster", { signal: ctx.signal }), null];
  } catch (error) {
    if (error.name === "AbortError" || error.status === 0) throw error;
    const own = await ctx.api.get("/v1/diagnostics/performance-envelopes", { signal: ctx.signal });
    const note = h("p", { class: "notice", role: "status" }, `Showing this node only: the cluster fan-out failed (${error.message}).`);
    return [{ nodes: [{ nodeId: own.nodeId, ok: true, envelopes: own.envelopes }] }, note];
  }
}

export async function mount(root, ctx) {
  const nodeName = (id) => ctx.live.state?.nodeIdentities?.[id]?.friendlyName || id;
  const modelSelect = h("select", { id: "perf-model" }, h("option", { value: ALL }, "All models"));
  const refresh = h("button", { type: "button" }, "Refresh performance");
  const status = h("div", { "aria-live": "polite" });
  const body = h("div", { class: "envelopes" });
  let latest = null;
  let timer = null;
  let failures = 0; // consecutive failed reads: the next one waits longer (to 8x)

  let drawn = null;
  const draw = () => {
    if (!latest) return;
    // Redraw only on a change, so the refresh never pulls focus out of a table.
    const key = JSON.stringify([latest, modelSelect.value, Boolean(ctx.live.state)]);
    if (key === drawn) return;
    drawn = key;
    const rows = envelopeRows(latest);
    const models = [...new Set(rows.map((r) => r.envelope.modelId))];
    const chosen = models.includes(modelSelect.value) ? modelSelect.value : ALL;
    replace(modelSelect, h("option", { value: ALL }, "All models"), models.map((m) => h("option", { value: m }, m)));
    modelSelect.value = chosen;
    const failed = (latest.nodes || []).filter((n) => !n.ok);
    const shown = rows.filter((r) => chosen === ALL || r.envelope.modelId === chosen);
    replace(
      body,
      failed.length
        ? h(
            "div",
            { class: "notice", role: "status" },
            h("p", null, "Some members did not answer, so their envelopes are missing:"),
            h("ul", null, failed.map((n) => h("li", null, `${nodeName(n.nodeId)}: ${n.error || "no answer"}`))),
          )
        : null,
      rows.length ? shown.map((r, i) => envelopeCard(r, nodeName, i)) : emptyState(),
    );
  };

  async function load() {
    clearTimeout(timer);
    try {
      const [answer, note] = await readEnvelopes(ctx);
      latest = answer;
      failures = 0;
      replace(status, note);
      draw();
    } catch (error) {
      if (error.name === "AbortError") return;
      failures += 1;
      replace(status, errorBox(`Performance envelopes could not be read: ${error.message}`, load));
    }
    if (!ctx.signal.aborted && !document.hidden) timer = setTimeout(load, REFRESH_MS * 2 ** Math.min(failures, 3));
  }
  const onVisible = () => {
    if (!document.hidden) load();
    else clearTimeout(timer);
  };

  // Names come with the first /state: draw once more when they arrive (not on every
  // poll, which would rebuild the tables under the reader).
  let named = Boolean(ctx.live.state);
  const unsubscribe = ctx.live.subscribe(() => {
    if (named) return;
    named = true;
    draw();
  });
  modelSelect.addEventListener("change", draw);
  refresh.addEventListener("click", load);
  document.addEventListener("visibilitychange", onVisible);
  replace(
    root,
    h("h1", null, "Performance"),
    h("p", { class: "muted" }, "Decode throughput and time to first token against concurrency, per model, engine and quantization, as each member observed them serving real requests. Observe-only: nothing here changes how requests are served."),
    h("div", { class: "toolbar" }, h("label", { for: "perf-model" }, "Filter by model"), modelSelect, refresh),
    status,
    body,
    capabilitiesPanel(ctx),
  );
  await load();
  return () => {
    clearTimeout(timer);
    unsubscribe();
    document.removeEventListener("visibilitychange", onVisible);
  };
}
