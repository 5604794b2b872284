// The managed capability nodes of /state.capabilityNodes (keyed by host node id): each
// capability, its owner (host) node, the owner-reported status, its ready surfaces
// and its actions (a descriptor action on this node runs from here through
// POST /v1/capabilities/call), live from ctx.live (redrawn only when something changed). A host's
// reading older than 90 s shows as not heard from recently (the API drops it at the
// same age).
import { formatAge, h, replace } from "../dom.js";
import { surfaceReach } from "../surface_reach.js";

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

function surfaces(node, reachFrom) {
  const list = (node.surfaces || []).filter((s) => s.url);
  if (!list.length) return "—";
  return h(
    "ul",
    { class: "plain-list" },
    list.map((s) => {
      const name = s.title || node.title || node.pluginId;
      if (s.ready === false) return h("li", null, h("span", { class: "muted" }, `${name} (not ready)`));
      const { url, hint } = surfaceReach(s.url, reachFrom);
      return h(
        "li",
        null,
        url
          ? h("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, `Open ${name}`)
          : [h("span", { class: "badge warn" }, `${name}: unreachable from this browser`), " ", h("span", { class: "muted" }, hint)],
      );
    }),
  );
}

const actionKey = (host, node, action) => [host, node.pluginId, node.nodeId, action.actionId].join("/");

/** A descriptor action's fixed payload, called on this node (POST /v1/capabilities/call
 * addresses the node that answers; a peer's action runs from that peer's dashboard). */
export async function runDescriptor(ctx, ownId, action) {
  const listing = await ctx.api.get("/v1/capabilities", { signal: ctx.signal });
  const version = action.version || "1.0.0";
  const revision = listing.revisions?.[`${action.capabilityId}@${version}`];
  if (!revision) throw new Error(`this node no longer serves ${action.capabilityId}@${version}`);
  return ctx.api.post(
    "/v1/capabilities/call",
    {
      call_id: `dashboard-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`,
      capability_id: action.capabilityId,
      version,
      descriptor_revision: revision,
      caller_node: ownId,
      target_node: ownId,
      timeout_seconds: 30,
      payload: action.payload || {},
    },
    { signal: ctx.signal },
  );
}

function outcome(result) {
  if (!result) return null;
  if (result.pending) return h("span", { class: "muted" }, "Running…");
  if (result.failed) return h("span", { class: "counter-bad" }, result.failed);
  if (!result.answer.ok) return h("span", { class: "counter-bad" }, `${result.answer.error?.code}: ${result.answer.error?.message}`);
  return h("code", null, JSON.stringify(result.answer.result).slice(0, 300));
}

function actions(host, node, view) {
  const list = node.actions || [];
  if (!list.length) return "—";
  const hostName = view.identities?.[host]?.friendlyName || host;
  return h(
    "ul",
    { class: "plain-list" },
    list.map((a) => {
      if (a.kind === "link" && a.url) {
        const { url, hint } = surfaceReach(a.url, { hostNodeId: host, servingNodeId: view.ownId ?? null, hostName });
        return h("li", null, url ? h("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, a.title) : [a.title, " ", h("span", { class: "muted" }, hint)]);
      }
      if (a.kind !== "descriptor") return h("li", null, a.title);
      if (host !== view.ownId) return h("li", null, a.title, h("span", { class: "muted" }, ` (runs from ${hostName}'s own dashboard)`));
      const key = actionKey(host, node, a);
      return h(
        "li",
        null,
        h("button", { type: "button", dataset: { actionKey: key }, "aria-busy": view.results.get(key)?.pending ? "true" : null, onClick: () => view.run(key, a) }, `Run ${a.title}`),
        " ",
        h("output", { "aria-live": "polite" }, outcome(view.results.get(key))),
      );
    }),
  );
}

function row({ host, node }, view, now) {
  const identities = view.identities;
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
    h("td", null, surfaces(node, { hostNodeId: host, servingNodeId: view.ownId ?? null, hostName })),
    h("td", null, actions(host, node, view)),
    h("td", null, Number.isFinite(observed) ? h("time", { datetime: node.observedAt, title: formatAge(node.observedAt, now) }, new Date(observed).toLocaleTimeString()) : "—"),
  );
}

/** The "Capabilities" panel; it follows ctx.live until ctx.signal aborts. */
export function capabilitiesPanel(ctx) {
  const body = h("div");
  let drawn = null;
  let ownId = null;
  const results = new Map();
  const redraw = () => {
    const focused = document.activeElement?.dataset?.actionKey;
    drawn = null;
    draw(ctx.live.state);
    // A redraw replaces the buttons: keep the keyboard on the one it was on.
    const again = focused ? [...body.querySelectorAll("button[data-action-key]")].find((b) => b.dataset.actionKey === focused) : null;
    if (again) again.focus();
  };
  const run = async (key, action) => {
    if (results.get(key)?.pending) return; // one run at a time per action
    results.set(key, { pending: true });
    redraw();
    try {
      results.set(key, { answer: await runDescriptor(ctx, ownId, action) });
    } catch (error) {
      if (error.name === "AbortError") return;
      results.set(key, { failed: `Not run: ${error.message}` });
    }
    redraw();
  };
  const draw = (state) => {
    if (!state) return;
    const rows = capabilityRows(state);
    const now = Date.now();
    // Redraw only on a change (a new reading, a node going stale, a name learned), so
    // a 2 s poll never pulls focus out of the table.
    const key = JSON.stringify([rows, rows.map((r) => now - Date.parse(r.node.observedAt) > STALE_AFTER_MS), state.nodeIdentities, ownId]);
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
              h("tbody", null, rows.map((r) => row(r, { identities: state.nodeIdentities, ownId, results, run }, now))),
            ),
          )
        : h("p", { class: "empty" }, "No managed capability nodes are running. A plugin that runs its own capability node (an installed bundle with its own interface) appears here with its owner node and status once it is active; install and activate plugins on the Plugins page."),
    );
  };
  replace(body, h("p", { class: "muted" }, "Waiting for the cluster state…"));
  const unsubscribe = ctx.live.subscribe(draw);
  // Which node answers this page: its own descriptor actions can run from here.
  ctx.api
    .get("/node_id", { signal: ctx.signal })
    .then((id) => {
      ownId = id;
      redraw();
    })
    .catch(() => {});
  ctx.signal.addEventListener("abort", unsubscribe, { once: true });
  return h(
    "section",
    { class: "panel", "aria-labelledby": "capabilities-heading" },
    h("h2", { id: "capabilities-heading" }, "Capabilities"),
    h("p", { class: "muted" }, "Managed capability nodes each member runs, as their owners report them."),
    body,
  );
}
