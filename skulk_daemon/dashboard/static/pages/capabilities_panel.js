// The managed capability nodes of /state.capabilityNodes (keyed by host node id): each
// capability, its owner (host) node, the owner-reported status, and its ready
// surfaces, live from ctx.live (redrawn only when something changed). A host's
// reading older than 90 s shows as not heard from recently (the API drops it at the
// same age).
import { formatAge, h, replace } from "../dom.js";

export const STALE_AFTER_MS = 90_000;

const STATUS_CLASS = {
  ready: "ok",
  installed: "",
  starting: "warn",
  degraded: "warn",
  disabled: "",
  configuration_invalid: "bad",
  failed: "bad",
};

/** Every capability node as a row: [{host, node}] in host then title order. */
export function capabilityRows(state) {
  const rows = [];
  for (const [host, nodes] of Object.entries(state?.capabilityNodes || {})) {
    for (const node of nodes || []) rows.push({ host, node });
  }
  const title = (r) => r.node.title || r.node.pluginId;
  return rows.sort((a, b) => a.host.localeCompare(b.host) || title(a).localeCompare(title(b)));
}

function surfaces(node) {
  const list = (node.surfaces || []).filter((s) => s.url);
  if (!list.length) return "—";
  return h(
    "ul",
    { class: "plain-list" },
    list.map((s) => {
      const name = s.title || node.title || node.pluginId;
      return h(
        "li",
        null,
        s.ready === false
          ? h("span", { class: "muted" }, `${name} (not ready)`)
          : h("a", { href: s.url, target: "_blank", rel: "noopener noreferrer" }, `Open ${name}`),
      );
    }),
  );
}

function row({ host, node }, identities, now) {
  const hostName = identities?.[host]?.friendlyName || host;
  const observed = Date.parse(node.observedAt);
  const stale = Number.isFinite(observed) && now - observed > STALE_AFTER_MS;
  const title = node.title || node.pluginId;
  return h(
    "tr",
    { class: stale ? "stale" : null },
    h("th", { scope: "row" }, title, h("br"), h("code", { class: "muted" }, `${node.pluginId} · ${node.nodeId}`)),
    h("td", null, h("a", { href: `/node/${encodeURIComponent(host)}` }, hostName)),
    h(
      "td",
      null,
      h("span", { class: ["badge", STATUS_CLASS[node.status] ?? ""] }, (node.status || "installed").replace("_", " ")),
      stale ? h("span", { class: "muted" }, " not heard from recently") : null,
      h("br"),
      h("span", { class: "muted" }, node.ownerAvailable ? "owner available" : "owner unavailable"),
    ),
    h("td", null, String(node.operationsActive ?? 0)),
    h("td", null, node.version, h("br"), h("span", { class: "muted" }, node.bundleId)),
    h("td", null, surfaces(node)),
    h("td", null, (node.actions || []).length ? (node.actions || []).map((a) => a.title).join(", ") : "—"),
    h("td", null, Number.isFinite(observed) ? h("time", { datetime: node.observedAt, title: formatAge(node.observedAt, now) }, new Date(observed).toLocaleTimeString()) : "—"),
  );
}

/** The "Capabilities" panel; it follows ctx.live until ctx.signal aborts. */
export function capabilitiesPanel(ctx) {
  const body = h("div");
  let drawn = null;
  const draw = (state) => {
    const rows = capabilityRows(state);
    const now = Date.now();
    // Redraw only on a change (a new reading, a node going stale, a name learned), so
    // a 2 s poll never pulls focus out of the table.
    const key = JSON.stringify([rows, rows.map((r) => now - Date.parse(r.node.observedAt) > STALE_AFTER_MS), state?.nodeIdentities]);
    if (key === drawn) return;
    drawn = key;
    replace(
      body,
      rows.length
        ? h(
            "div",
            { class: "table-wrap" },
            h(
              "table",
              { class: "instances", "aria-label": "Managed capability nodes" },
              h("thead", null, h("tr", null, ["Capability", "Owner node", "Status", "Operations", "Version", "Surfaces", "Actions", "Last reading"].map((t) => h("th", { scope: "col" }, t)))),
              h("tbody", null, rows.map((r) => row(r, state.nodeIdentities, now))),
            ),
          )
        : h("p", { class: "empty" }, "No managed capability nodes are running. A plugin that runs its own capability node (an installed bundle with its own interface) appears here with its owner node and status once it is active; install and activate plugins on the Plugins page."),
    );
  };
  replace(body, h("p", { class: "muted" }, "Waiting for the cluster state…"));
  const unsubscribe = ctx.live.subscribe(draw);
  ctx.signal.addEventListener("abort", unsubscribe, { once: true });
  return h(
    "section",
    { class: "panel", "aria-labelledby": "capabilities-heading" },
    h("h2", { id: "capabilities-heading" }, "Capabilities"),
    h("p", { class: "muted" }, "Managed capability nodes each member runs, as their owners report them."),
    body,
  );
}
