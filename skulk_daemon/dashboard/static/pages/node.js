// One node's live diagnostics, read-only, through the cluster fan-out routes:
// GET /v1/diagnostics/cluster/{node_id} (the node's whole bundle, proxied when it is
// another member) and GET /v1/diagnostics/cluster/timeline (filtered to this node).
import { errorBox, formatBytes, h, replace } from "../dom.js";

export const REFRESH_MS = 5000;
const TIMELINE_SHOWN = 100;

const dl = (...pairs) =>
  h("dl", { class: "facts" }, pairs.filter(Boolean).map(([k, v]) => [h("dt", null, k), h("dd", null, v ?? "—")]));

function section(id, title, ...body) {
  return h("section", { class: "panel", "aria-labelledby": id }, h("h2", { id }, title), ...body);
}

function counters(obj, failureKeys) {
  return dl(
    ...Object.entries(obj || {})
      .filter(([, v]) => typeof v === "number")
      .map(([k, v]) => [k, h("span", { class: failureKeys.has(k) && v > 0 ? "counter-bad" : "" }, String(v))]),
  );
}

const FAILURES = new Set(["unknownStream", "gaps", "overflows", "foreignSender", "droppedOut", "dropped", "failures"]);

function summary(bundle) {
  const rt = bundle.runtime || {};
  const cfg = bundle.config || {};
  const res = bundle.resources || {};
  return section(
    "node-summary",
    "Node bundle",
    dl(
      ["Node id", h("code", null, bundle.nodeId)],
      ["Role", rt.isMaster ? `master (term ${rt.term})` : `member (term ${rt.term})`],
      ["Master", rt.masterNodeId ? h("code", null, rt.masterNodeId) : "none"],
      ["Version", `${bundle.skulkVersion}${rt.skulkCommit ? ` (${rt.skulkCommit.slice(0, 10)})` : ""}`],
      ["Uptime", typeof rt.uptimeSeconds === "number" ? `${Math.round(rt.uptimeSeconds)} s` : null],
      ["API", cfg.apiHost ? `${cfg.apiHost}:${cfg.apiPort}` : null],
      ["Fabric port", cfg.fabricPort != null ? String(cfg.fabricPort) : null],
      ["Participation", cfg.participation],
      ["Memory", res.ramTotal ? `${formatBytes(res.ramTotal - (res.ramAvailable || 0))} used of ${formatBytes(res.ramTotal)}` : null],
      ["CPUs", res.cpuCount != null ? String(res.cpuCount) : null],
      ["Load", Array.isArray(res.loadAverage) ? res.loadAverage.map((x) => x.toFixed(2)).join(" ") : null],
      ["Models disk", res.modelsDiskTotal ? `${formatBytes(res.modelsDiskFree)} free of ${formatBytes(res.modelsDiskTotal)}` : null],
      ["Events applied", String(bundle.lastEventAppliedIdx ?? "—")],
    ),
  );
}

function doctor(bundle) {
  const findings = [...(bundle.doctor || [])];
  const order = { fail: 0, warn: 1, pass: 2 };
  findings.sort((a, b) => (order[a.verdict] ?? 1) - (order[b.verdict] ?? 1));
  const problems = findings.filter((f) => f.verdict !== "pass").length;
  return section(
    "node-doctor",
    "Doctor",
    h("p", { class: "muted" }, problems ? `${problems} of ${findings.length} checks need attention.` : `All ${findings.length} checks pass.`),
    h(
      "ul",
      { class: "findings", "aria-label": "Doctor findings" },
      findings.map((f) =>
        h(
          "li",
          { class: ["finding", f.verdict] },
          h("strong", null, f.title),
          " ",
          h("span", { class: ["badge", f.verdict === "pass" ? "ok" : f.verdict === "fail" ? "bad" : "warn"] }, f.verdict),
          f.detail ? h("p", null, f.detail) : null,
          f.consequence ? h("p", null, h("span", { class: "muted" }, "Consequence: "), f.consequence) : null,
          f.remediation ? h("p", null, h("span", { class: "muted" }, "Remediation: "), f.remediation) : null,
        ),
      ),
    ),
  );
}

function runners(bundle) {
  const list = bundle.supervisorRunners || [];
  return section(
    "node-runners",
    "Runners and phases",
    list.length
      ? h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { class: "instances" },
            h("thead", null, h("tr", null, ["Model", "Phase", "Status", "Rank", "Tasks"].map((t) => h("th", { scope: "col" }, t)))),
            h(
              "tbody",
              null,
              list.map((r) =>
                h(
                  "tr",
                  null,
                  h("td", null, r.modelId, h("br"), h("code", { class: "muted" }, r.runnerId)),
                  h("td", null, `${r.phase} (${Math.round(r.secondsInPhase)} s${r.phaseBudgetSeconds ? ` of ${Math.round(r.phaseBudgetSeconds)} s` : ""})`),
                  h("td", null, r.statusKind || "—", r.failure ? h("p", { class: "counter-bad" }, r.failure) : null),
                  h("td", null, `${r.deviceRank + 1} of ${r.worldSize}${r.rpcDonor ? " (RPC donor)" : ""}`),
                  h("td", null, String(r.activeTasks)),
                ),
              ),
            ),
          ),
        )
      : h("p", { class: "muted" }, "No runner on this node."),
  );
}

function dataPlane(bundle) {
  const cluster = bundle.cluster || {};
  return section(
    "node-data-plane",
    "Data plane",
    counters(bundle.dataPlane, FAILURES),
    cluster.frames ? [h("h3", null, "Fabric frames"), counters(cluster.frames, FAILURES)] : null,
    Array.isArray(cluster.peers) ? h("p", { class: "muted" }, `${cluster.peers.length} fabric peer${cluster.peers.length === 1 ? "" : "s"} · transport ${cluster.dataTransport || "—"}`) : null,
  );
}

function processes(bundle) {
  const list = bundle.processes || [];
  const providers = bundle.providers || {};
  const load = (name, x) => (x && typeof x.active === "number" ? [name, `${x.active} active of ${x.limit}`] : null);
  return section(
    "node-processes",
    "Processes and providers",
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "instances" },
        h("thead", null, h("tr", null, ["Process", "PID", "Memory", "CPU"].map((t) => h("th", { scope: "col" }, t)))),
        h(
          "tbody",
          null,
          list.map((p) =>
            h(
              "tr",
              null,
              h("td", null, `${p.role}${p.runnerId ? ` ${p.runnerId.slice(0, 8)}` : ""} (${p.name}, ${p.status})`),
              h("td", null, String(p.pid)),
              h("td", null, formatBytes(p.rssBytes)),
              h("td", null, `${Math.round(p.cpuPercent)}%`),
            ),
          ),
        ),
      ),
    ),
    dl(
      ["Capability providers", (providers.providers || []).join(", ") || "none"],
      load("Unary calls", providers.unaryCalls),
      load("Streams", providers.streams),
    ),
  );
}

function timeline(entries, unreachable) {
  const shown = entries.slice(-TIMELINE_SHOWN).reverse();
  return section(
    "node-timeline",
    "Timeline",
    unreachable ? h("p", { class: "muted" }, unreachable) : null,
    shown.length
      ? h("ol", { class: "timeline", "aria-label": "Runner timeline, newest first" }, shown.map((e) => h("li", null, h("time", { datetime: e.at }, new Date(e.at).toLocaleTimeString()), ` ${e.event} · ${e.phase}`, e.detail ? ` · ${e.detail}` : "", h("span", { class: "muted" }, ` (${e.runnerId.slice(0, 8)})`))))
      : h("p", { class: "muted" }, "No runner events recorded yet."),
  );
}

export async function mount(root, ctx) {
  const id = ctx.params.id;
  const body = h("div", { class: "sections" });
  const status = h("div", { "aria-live": "polite" });
  const heading = h("h1", null, "Node diagnostics");
  const refresh = h("button", { type: "button" }, "Refresh diagnostics");
  replace(
    root,
    h("p", null, h("a", { href: "/cluster" }, "← Cluster")),
    heading,
    h("p", { class: "muted" }, "Live, read-only diagnostics of ", h("code", null, id), ", refreshed every few seconds. ", refresh),
    status,
    body,
  );
  let timer = null;
  let loaded = false;

  async function load() {
    clearTimeout(timer);
    try {
      const path = `/v1/diagnostics/cluster/${encodeURIComponent(id)}`;
      const [bundle, merged] = await Promise.all([
        ctx.api.get(path, { signal: ctx.signal }),
        ctx.api.get("/v1/diagnostics/cluster/timeline", { signal: ctx.signal }).catch((error) => (error.name === "AbortError" ? Promise.reject(error) : null)),
      ]);
      const name = ctx.live.state?.nodeIdentities?.[id]?.friendlyName;
      heading.textContent = name ? `Node diagnostics: ${name}` : "Node diagnostics";
      const entries = (merged?.entries || []).filter((e) => e.nodeId === id);
      const missing = merged?.unreachableNodes?.some?.((u) => u.nodeId === id) ? "The timeline could not reach this node." : merged ? null : "The merged timeline is unavailable.";
      replace(body, summary(bundle), doctor(bundle), runners(bundle), dataPlane(bundle), processes(bundle), timeline(entries.length ? entries : bundle.flightRecorder || [], missing));
      replace(status);
      loaded = true;
    } catch (error) {
      if (error.name === "AbortError") return;
      const what = error.status === 404 ? `No cluster member is called ${id}.` : `Diagnostics for this node are unavailable: ${error.message}`;
      replace(status, errorBox(what, load));
      if (!loaded) replace(body);
    }
    if (!ctx.signal.aborted && !document.hidden) timer = setTimeout(load, REFRESH_MS);
  }
  const onVisible = () => {
    if (!document.hidden) load();
    else clearTimeout(timer);
  };
  refresh.addEventListener("click", load);
  document.addEventListener("visibilitychange", onVisible);
  await load();
  return () => {
    clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisible);
  };
}
