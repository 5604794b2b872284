// Traces (/traces and /traces/{task_id}): the cluster-wide tracing switch
// (GET/PUT /v1/tracing, new requests only), every member's trace records
// (GET /v1/traces/cluster: fanned out, one row per task, unreachable members named),
// and one task opened as a timeline (GET /v1/traces/cluster/{id} and its /stats), with
// its Chrome trace JSON one link away (GET /v1/traces/cluster/{id}/raw, which Perfetto
// and chrome://tracing open). Deleting is local-only in the API, and says so.
import { errorBox, formatAge, h, replace } from "../dom.js";
import { formatMs, renderTimeline } from "./trace_timeline.js";

export const REFRESH_MS = 5000;

function nodeNamer(ctx) {
  return (id) => ctx.live.state?.nodeIdentities?.[id]?.friendlyName || id || "—";
}

function section(id, title, ...body) {
  return h("section", { class: "panel", "aria-labelledby": id }, h("h2", { id }, title), ...body);
}

const tracePath = (id, tail = "") => `/v1/traces/cluster/${encodeURIComponent(id)}${tail}`;

/** The tracing switch: a checkbox with role=switch, its state from GET /v1/tracing. */
function tracingSwitch(ctx) {
  const input = h("input", { type: "checkbox", role: "switch", id: "tracing-switch", disabled: true });
  const status = h("p", { class: "muted", "aria-live": "polite" }, "Reading whether tracing is on…");
  const problem = h("div");
  const show = (enabled) => {
    input.checked = enabled;
    status.textContent = enabled
      ? "Tracing is on: new requests anywhere in the cluster record their spans."
      : "Tracing is off. Turn it on, then send a request (a chat, say) to record its trace.";
  };
  async function read() {
    try {
      const answer = await ctx.api.get("/v1/tracing", { signal: ctx.signal });
      show(Boolean(answer.enabled));
      input.disabled = false;
      replace(problem);
    } catch (error) {
      if (error.name === "AbortError") return;
      status.textContent = "";
      replace(problem, errorBox(`Could not read the tracing switch: ${error.message}`, read));
    }
  }
  input.addEventListener("change", async () => {
    const wanted = input.checked;
    input.disabled = true;
    status.textContent = wanted ? "Turning tracing on…" : "Turning tracing off…";
    try {
      const answer = await ctx.api.put("/v1/tracing", { enabled: wanted }, { signal: ctx.signal });
      show(Boolean(answer.enabled));
      replace(problem);
    } catch (error) {
      if (error.name === "AbortError") return;
      show(!wanted);
      replace(problem, errorBox(`Tracing was not changed: ${error.message}`));
    } finally {
      input.disabled = false;
    }
  });
  const element = section(
    "tracing-heading",
    "Tracing",
    h("div", { class: "switch-row" }, input, h("label", { for: "tracing-switch" }, "Trace new requests")),
    h("p", { class: "muted" }, "A runtime switch for the whole cluster. It applies to new requests only; work already in flight is not traced."),
    status,
    problem,
  );
  return { element, read };
}

function startedAt(us) {
  const date = new Date(us / 1000);
  return h("time", { datetime: date.toISOString(), title: formatAge(date) }, date.toLocaleString());
}

function traceTable(traces, nodeName) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "instances", "aria-label": "Cluster traces" },
      h("thead", null, h("tr", null, ["Task", "Model", "Kind", "Started", "Nodes", "Spans", "Tags"].map((t) => h("th", { scope: "col" }, t)))),
      h(
        "tbody",
        null,
        traces.map((t) =>
          h(
            "tr",
            null,
            h("td", null, h("a", { href: `/traces/${encodeURIComponent(t.taskId)}` }, h("code", null, t.taskId))),
            h("td", null, t.modelId || "—"),
            h("td", null, t.kind),
            h("td", null, startedAt(t.startedAtUs)),
            h("td", null, (t.sourceNodes || []).map(nodeName).join(", ") || "—"),
            h("td", null, String(t.spanCount)),
            h("td", null, (t.tags || []).length ? t.tags.map((tag) => h("span", { class: "badge" }, tag)) : "—"),
          ),
        ),
      ),
    ),
  );
}

function unreachableNote(list, nodeName) {
  if (!list || !list.length) return null;
  return h(
    "div",
    { class: "notice", role: "status" },
    h("p", null, "Some members did not answer, so this list may be partial:"),
    h("ul", null, list.map((u) => h("li", null, `${nodeName(u.nodeId)}: ${u.error}`))),
  );
}

async function mountList(root, ctx) {
  const nodeName = nodeNamer(ctx);
  const toggle = tracingSwitch(ctx);
  const filter = h("input", { type: "search", id: "trace-filter", placeholder: "model, task, kind or tag" });
  const refresh = h("button", { type: "button" }, "Refresh traces");
  const status = h("div", { "aria-live": "polite" });
  const body = h("div");
  let latest = null;
  let timer = null;
  let failures = 0; // consecutive failed reads: the next one waits longer (to 8x)

  let drawn = null;
  const draw = () => {
    if (!latest) return;
    // Redraw only on a change, so the 5 s refresh never pulls focus out of the list.
    const key = JSON.stringify([latest, filter.value, Boolean(ctx.live.state)]);
    if (key === drawn) return;
    drawn = key;
    const needle = filter.value.trim().toLowerCase();
    const shown = needle
      ? latest.traces.filter((t) => [t.taskId, t.modelId, t.kind, ...(t.tags || [])].some((x) => String(x || "").toLowerCase().includes(needle)))
      : latest.traces;
    replace(
      body,
      unreachableNote(latest.unreachableNodes, nodeName),
      latest.traces.length === 0
        ? h("p", { class: "empty" }, "No traces yet. Turn on “Trace new requests” above, then send a request (a chat on the Chat page, or any API client): its trace appears here within a few seconds.")
        : shown.length === 0
          ? h("p", { class: "empty" }, `No trace matches “${filter.value.trim()}”.`)
          : [h("p", { class: "muted" }, `${shown.length} of ${latest.traces.length} trace${latest.traces.length === 1 ? "" : "s"}, newest first.`), traceTable(shown, nodeName)],
    );
  };

  async function load() {
    clearTimeout(timer);
    try {
      latest = await ctx.api.get("/v1/traces/cluster", { signal: ctx.signal });
      failures = 0;
      replace(status);
      draw();
    } catch (error) {
      if (error.name === "AbortError") return;
      failures += 1;
      replace(status, errorBox(`The cluster's traces could not be read: ${error.message}`, load));
    }
    if (!ctx.signal.aborted && !document.hidden) timer = setTimeout(load, REFRESH_MS * 2 ** Math.min(failures, 3));
  }
  const onVisible = () => {
    if (!document.hidden) load();
    else clearTimeout(timer);
  };

  let named = Boolean(ctx.live.state);
  const unsubscribe = ctx.live.subscribe(() => {
    if (named) return;
    named = true;
    draw();
  });
  filter.addEventListener("input", draw);
  refresh.addEventListener("click", () => Promise.all([toggle.read(), load()]));
  document.addEventListener("visibilitychange", onVisible);
  replace(
    root,
    h("h1", null, "Traces"),
    h("p", { class: "muted" }, "Where the time of single requests went, across every node that took part: the API node, the master and the runners."),
    toggle.element,
    section(
      "traces-heading",
      "Cluster traces",
      h("div", { class: "toolbar" }, h("label", { for: "trace-filter" }, "Filter traces"), filter, refresh),
      status,
      body,
    ),
  );
  await Promise.all([toggle.read(), load()]);
  return () => {
    clearTimeout(timer);
    unsubscribe();
    document.removeEventListener("visibilitychange", onVisible);
  };
}

function statsTable(stats) {
  const rows = Object.entries(stats.spans || {}).sort((a, b) => b[1].totalMs - a[1].totalMs);
  if (!rows.length) return h("p", { class: "muted" }, "No timed spans.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "instances", "aria-label": "Span timing" },
      h("thead", null, h("tr", null, ["Span", "Count", "Total", "Longest"].map((t) => h("th", { scope: "col" }, t)))),
      h(
        "tbody",
        null,
        rows.map(([name, s]) => h("tr", null, h("td", null, name), h("td", null, String(s.count)), h("td", null, formatMs(s.totalMs * 1000)), h("td", null, formatMs(s.maxMs * 1000)))),
      ),
    ),
  );
}

async function mountTrace(root, ctx) {
  const id = ctx.params.id;
  const nodeName = nodeNamer(ctx);
  const status = h("div", { "aria-live": "polite" });
  const body = h("div", { class: "trace-view" });
  const deleteButton = h("button", { type: "button" }, "Delete this node's copy");
  replace(
    root,
    h("p", null, h("a", { href: "/traces" }, "← Traces")),
    h("h1", null, "Trace ", h("code", null, id)),
    status,
    body,
  );

  async function load() {
    replace(status, h("p", { class: "muted" }, "Loading the trace from every member…"));
    try {
      const [record, stats] = await Promise.all([ctx.api.get(tracePath(id), { signal: ctx.signal }), ctx.api.get(tracePath(id, "/stats"), { signal: ctx.signal })]);
      const timeline = renderTimeline(record, { nodeName });
      replace(
        body,
        h(
          "dl",
          { class: "facts trace-facts" },
          [
            ["Model", record.modelId || "—"],
            ["Kind", record.kind],
            ["Started", startedAt(record.startedUs)],
            ["Total", formatMs(stats.totalMs * 1000)],
            ["Nodes", (record.sourceNodes || []).map(nodeName).join(", ") || "—"],
            ["Tags", (record.tags || []).join(", ") || "—"],
          ].map(([k, v]) => [h("dt", null, k), h("dd", null, v)]),
        ),
        h(
          "div",
          { class: "toolbar" },
          h("a", { class: "button-link", href: tracePath(id, "/raw"), download: `trace-${id}.json` }, "Download Chrome trace JSON"),
          deleteButton,
        ),
        h("p", { class: "muted" }, "The download opens in Perfetto (ui.perfetto.dev) or chrome://tracing. Deleting removes only this node's record of the task; other members keep theirs."),
        section("timeline-heading", "Timeline", timeline.element),
        section("stats-heading", "Span timing", statsTable(stats)),
      );
      replace(status);
    } catch (error) {
      if (error.name === "AbortError") return;
      const what = error.status === 404 ? `No member holds a trace of ${id}. It may have been deleted, or its nodes are unreachable.` : `The trace could not be read: ${error.message}`;
      replace(status, errorBox(what, error.status === 404 ? null : load));
    }
  }

  deleteButton.addEventListener("click", async () => {
    deleteButton.disabled = true;
    try {
      const answer = await ctx.api.post("/v1/traces/delete", { taskIds: [id] }, { signal: ctx.signal });
      if ((answer.deleted || []).includes(id)) ctx.navigate("/traces");
      else replace(status, errorBox("This node holds no record of this task (another member recorded it); deleting is local to each node."));
    } catch (error) {
      if (error.name === "AbortError") return;
      replace(status, errorBox(`The trace was not deleted: ${error.message}`));
    } finally {
      deleteButton.disabled = false;
    }
  });
  await load();
  return () => {};
}

export async function mount(root, ctx) {
  return ctx.params.id ? mountTrace(root, ctx) : mountList(root, ctx);
}
