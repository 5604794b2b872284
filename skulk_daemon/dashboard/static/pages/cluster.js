// The Cluster page: every member as a node of the topology (cards joined by drawn
// links), its capability satellites, and the placed instances with their runners,
// live from ctx.live (/state).
import { errorBox, formatAge, formatBytes, h, replace } from "../dom.js";
import { surfaceReach } from "../surface_reach.js";
import { readCluster } from "./cluster_model.js";

function memoryRow(member) {
  if (member.memoryTotal === null) return [h("dt", null, "Memory"), h("dd", null, "not reported")];
  const used = member.memoryUsed ?? 0;
  const labelId = `mem-${member.id}`;
  return [
    h("dt", { id: labelId }, "Memory"),
    h(
      "dd",
      null,
      `${formatBytes(used)} used of ${formatBytes(member.memoryTotal)}`,
      h("meter", { min: "0", max: String(member.memoryTotal), value: String(used), "aria-labelledby": labelId, class: "memory-meter" }),
    ),
  ];
}

function acceleratorText(acc) {
  if (!acc) return "CPU only";
  const vram = acc.vramTotal?.inBytes ? `, ${formatBytes(acc.vramTotal.inBytes)}` : "";
  return `${acc.count > 1 ? `${acc.count}× ` : ""}${acc.vendor} ${acc.name}${vram}`;
}

function satellite(sat, member, servingNodeId) {
  const title = sat.title || sat.pluginId;
  const reach = (sat.surfaces || [])
    .filter((surface) => surface.ready && surface.url)
    .map((surface) => surfaceReach(surface.url, { hostNodeId: member.id, servingNodeId, hostName: member.name }));
  return h(
    "li",
    { class: ["satellite", sat.stale && "stale"] },
    h("span", null, title),
    h("span", { class: ["badge", sat.status] }, sat.stale ? `${sat.status}, not heard from recently` : sat.status),
    ...reach.map(({ url, hint }) =>
      url
        ? h("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, `Open ${title}`)
        : [h("span", { class: "badge warn" }, "unreachable from this browser"), h("span", { class: "muted satellite-hint" }, hint)],
    ),
  );
}

function runnerItem(runner) {
  return h(
    "li",
    { class: "runner" },
    h("span", null, runner.modelId, runner.worldSize > 1 ? ` (rank ${runner.rank} of ${runner.worldSize})` : ""),
    h("span", { class: ["badge", runner.tone], title: runner.error || "" }, runner.status),
  );
}

function linksText(member, model, names) {
  const peers = model.links
    .filter((l) => l.a === member.id || l.b === member.id)
    .map((l) => {
      const other = l.a === member.id ? l.b : l.a;
      return `${names.get(other) || other.slice(0, 12)}${l.session ? "" : " (address only)"}`;
    });
  if (peers.length) return peers.join(", ");
  return model.members.length > 1 ? "no link to another member" : "no other member";
}

function memberCard(member, model, names, ctx, servingNodeId) {
  const term = model.term;
  const headingId = `node-${member.id}`;
  const healthTone = member.health === "ok" ? "ok" : member.health;
  return h(
    "li",
    { "data-node-id": member.id },
    h(
      "article",
      { class: ["member", member.isMaster && "master"], "aria-labelledby": headingId },
      h(
        "div",
        { class: "member-head" },
        h("h3", { id: headingId }, member.name),
        h("span", { class: ["badge", member.isMaster && "master"] }, member.isMaster ? `master · term ${term ?? "?"}` : "member"),
      ),
      h(
        "dl",
        { class: "facts" },
        h("dt", null, "Health"),
        h("dd", null, h("span", { class: ["badge", healthTone] }, member.health)),
        ...memoryRow(member),
        h("dt", null, "Accelerator"),
        h("dd", null, acceleratorText(member.accelerator)),
        h("dt", null, "Linked to"),
        h("dd", null, linksText(member, model, names)),
        h("dt", null, "Backends"),
        h("dd", null, member.backends.length ? member.backends.join(", ") : "none"),
        member.participation && member.participation !== "full" ? [h("dt", null, "Participation"), h("dd", null, member.participation)] : null,
        h("dt", null, "Node id"),
        h("dd", null, h("code", null, member.id)),
        member.lastSeen ? [h("dt", null, "Last seen"), h("dd", null, formatAge(member.lastSeen))] : null,
      ),
      member.reasons.length
        ? h("ul", { class: "reasons", "aria-label": `Health reasons for ${member.name}` }, member.reasons.map((r) => h("li", null, `${r.message} — ${r.remediation}`)))
        : null,
      member.satellites.length
        ? [h("h4", { class: "muted" }, "Capability nodes"), h("ul", { class: "satellites", "aria-label": `Capability nodes on ${member.name}` }, member.satellites.map((sat) => satellite(sat, member, servingNodeId)))]
        : null,
      member.runners.length
        ? [h("h4", { class: "muted" }, "Runners"), h("ul", { class: "runners", "aria-label": `Runners on ${member.name}` }, member.runners.map(runnerItem))]
        : null,
      h(
        "div",
        { class: "member-actions" },
        h(
          "button",
          {
            type: "button",
            "data-focus-key": `inspect-${member.id}`,
            "aria-describedby": headingId,
            onClick: () => ctx.navigate(`/node/${encodeURIComponent(member.id)}`),
          },
          "Inspect live node diagnostics",
        ),
      ),
    ),
  );
}

function instancesTable(instances) {
  if (!instances.length) return h("p", { class: "muted" }, "No model is placed. Launch one from Models.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "instances" },
      h("caption", { class: "sr-only" }, "Placed instances and their runners"),
      h("thead", null, h("tr", null, h("th", { scope: "col" }, "Model"), h("th", { scope: "col" }, "Kind"), h("th", { scope: "col" }, "Runners"))),
      h(
        "tbody",
        null,
        instances.map((inst) =>
          h(
            "tr",
            null,
            h("td", null, inst.modelId, h("br"), h("code", { class: "muted" }, inst.instanceId)),
            h("td", null, inst.kind),
            h(
              "td",
              null,
              h(
                "ul",
                { class: "runners" },
                inst.runners.map((r) => h("li", null, h("a", { href: `/node/${encodeURIComponent(r.nodeId)}` }, r.nodeName), " · ", h("span", { class: ["badge", r.tone], title: r.error || "" }, r.status), r.error ? h("span", { class: "muted" }, ` ${r.error}`) : null)),
              ),
            ),
          ),
        ),
      ),
    ),
  );
}

function drawLinks(svg, list, links) {
  const box = list.getBoundingClientRect();
  svg.setAttribute("viewBox", `0 0 ${Math.max(1, box.width)} ${Math.max(1, box.height)}`);
  const centre = (id) => {
    const card = list.querySelector(`li[data-node-id="${CSS.escape(id)}"]`);
    if (!card) return null;
    const r = card.getBoundingClientRect();
    return [r.left - box.left + r.width / 2, r.top - box.top + r.height / 2];
  };
  const lines = [];
  for (const link of links) {
    const a = centre(link.a);
    const b = centre(link.b);
    if (a && b) lines.push(h("line", { x1: a[0], y1: a[1], x2: b[0], y2: b[1], class: link.session ? "session" : "" }));
  }
  replace(svg, ...lines);
}

export async function mount(root, ctx) {
  const summary = h("div", { class: "summary", "aria-label": "Cluster summary" });
  const svg = h("svg", { class: "topology-links", "aria-hidden": "true", focusable: "false" });
  const list = h("ul", { class: "members", "aria-label": "Cluster members" });
  const instances = h("div");
  const status = h("div", { "aria-live": "polite" });
  replace(
    root,
    h("h1", null, "Cluster"),
    status,
    summary,
    h("section", { "aria-labelledby": "topology-heading" }, h("h2", { id: "topology-heading" }, "Topology"), h("div", { class: "topology" }, svg, list)),
    h("section", { "aria-labelledby": "instances-heading" }, h("h2", { id: "instances-heading" }, "Instances"), instances),
  );
  let latest = null;
  let servingNodeId = null;
  const redrawLinks = () => latest && drawLinks(svg, list, latest.links);

  const render = (state) => {
    const model = readCluster(state);
    latest = model;
    const names = new Map(model.members.map((m) => [m.id, m.name]));
    for (const inst of model.instances) for (const r of inst.runners) r.nodeName = names.get(r.nodeId) || r.nodeId.slice(0, 12);
    // NOTE: the cards are rebuilt on each snapshot; the focused control (found by its
    // data-focus-key) is focused again so a keyboard user keeps their place.
    const focusKey = document.activeElement?.dataset?.focusKey;
    const ready = model.instances.reduce((n, i) => n + i.runners.filter((r) => r.tone === "ok").length, 0);
    const runnerCount = model.instances.reduce((n, i) => n + i.runners.length, 0);
    const stat = (value, label) => h("div", { class: "stat" }, h("span", { class: "value" }, String(value)), h("span", { class: "label" }, label));
    replace(
      summary,
      stat(model.members.length, model.members.length === 1 ? "node" : "nodes"),
      stat(model.term ?? "—", "election term"),
      stat(model.instances.length, model.instances.length === 1 ? "instance" : "instances"),
      stat(`${ready}/${runnerCount}`, "runners ready"),
    );
    replace(list, ...model.members.map((m) => memberCard(m, model, names, ctx, servingNodeId)));
    replace(instances, instancesTable(model.instances));
    if (focusKey) list.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`)?.focus();
    redrawLinks();
  };

  const offState = ctx.live.subscribe(render);
  // Which node answers this page: a loopback surface opens only from its own host.
  ctx.api
    .get("/node_id", { signal: ctx.signal })
    .then((id) => {
      servingNodeId = id;
      if (ctx.live.state) render(ctx.live.state);
    })
    .catch(() => {});
  const offStatus = ctx.live.onStatus((s, error) => {
    if (s !== "unreachable") replace(status);
    else if (!ctx.live.state) replace(status, errorBox(`The node did not answer: ${error?.message || "unreachable"}. Retrying.`));
    else replace(status, errorBox("The node is not answering: this is the cluster as it was last seen. Retrying."));
  });
  const resize = new ResizeObserver(redrawLinks);
  resize.observe(list);
  return () => {
    offState();
    offStatus();
    resize.disconnect();
  };
}
