// One trace as a timeline: every span of a merged cluster record (GET
// /v1/traces/cluster/{task_id}) on a shared time axis, one row per (node, lane), with
// its offset and duration. Pure layout (layoutTrace, ticks, formatMs) is separate from
// the DOM (renderTimeline) so either can be read alone.
//
// Keyboard: the spans are one tab stop (roving tabindex). Left/Right move to the
// previous/next span in time, Up/Down to the nearest span of the row above/below,
// Home/End to the first/last; moving selects, and the selected span's details are
// announced (aria-live).
import { h, replace } from "../dom.js";

const ROW_REM = 1.55;

/** "0.42 ms", "12.3 ms", "340 ms", "1.25 s" from microseconds. */
export function formatMs(us) {
  const ms = us / 1000;
  if (!Number.isFinite(ms)) return "—";
  if (ms === 0) return "0 ms";
  if (Math.abs(ms) >= 1000) return `${(ms / 1000).toFixed(ms >= 10000 ? 1 : 2)} s`;
  if (Math.abs(ms) >= 100) return `${Math.round(ms)} ms`;
  if (Math.abs(ms) >= 10) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(2)} ms`;
}

/** Tick positions (µs from the start) at a 1/2/5 step, at most `most` of them. */
export function ticks(totalUs, most = 6) {
  if (!(totalUs > 0)) return [0];
  const raw = totalUs / Math.max(1, most - 1);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) || raw;
  const out = [];
  for (let t = 0; t <= totalUs + 1e-9; t += step) out.push(t);
  return out;
}

/** Rows of spans on one axis: {t0, totalUs, lanes: [{nodeId, lane, items}], items}.
 * Each item: {span, index, laneIndex, offsetUs, durationUs (null: an instant)}. Lanes
 * keep the order nodes and lanes first appear in (the API node's request first). */
export function layoutTrace(record) {
  const spans = [...(record.spans || [])].sort((a, b) => a.startUs - b.startUs);
  const t0 = Math.min(record.startedUs ?? Infinity, ...spans.map((s) => s.startUs));
  const start = Number.isFinite(t0) ? t0 : 0;
  let end = start;
  for (const s of spans) end = Math.max(end, s.startUs + (s.durationUs || 0));
  const lanes = [];
  const byKey = new Map();
  const items = spans.map((span, index) => {
    const key = `${span.nodeId}\u0000${span.lane}`;
    if (!byKey.has(key)) {
      byKey.set(key, lanes.length);
      lanes.push({ nodeId: span.nodeId, lane: span.lane, items: [] });
    }
    const laneIndex = byKey.get(key);
    const item = { span, index, laneIndex, offsetUs: span.startUs - start, durationUs: span.durationUs ?? null };
    lanes[laneIndex].items.push(item);
    return item;
  });
  // Group a node's lanes together, nodes in the order they first appear.
  const nodeOrder = [...new Set(lanes.map((l) => l.nodeId))];
  const order = lanes.map((l, i) => i).sort((a, b) => nodeOrder.indexOf(lanes[a].nodeId) - nodeOrder.indexOf(lanes[b].nodeId) || a - b);
  const sorted = order.map((i) => lanes[i]);
  const remap = new Map(order.map((old, now) => [old, now]));
  for (const item of items) item.laneIndex = remap.get(item.laneIndex);
  const totalUs = Math.max(0, end - start);
  for (const lane of sorted) packRows(lane, totalUs);
  return { t0: start, totalUs, lanes: sorted, items };
}

/** Stacks a lane's overlapping spans (a "generate" holding its "decode") into rows:
 * each item gets the first row free at its start; lane.depth is the row count. An
 * instant takes a sliver of the axis, so it never hides under a bar. */
function packRows(lane, totalUs) {
  const sliver = totalUs * 0.01;
  const ends = [];
  for (const item of lane.items) {
    const until = item.offsetUs + Math.max(item.durationUs ?? 0, sliver);
    let row = ends.findIndex((e) => e <= item.offsetUs);
    if (row < 0) row = ends.push(until) - 1;
    else ends[row] = until;
    item.row = row;
  }
  lane.depth = Math.max(1, ends.length);
}

const pct = (value, total) => (total > 0 ? Math.min(100, Math.max(0, (value / total) * 100)) : 0);

function spanLabel(item, nodeName) {
  const { span } = item;
  const where = `${span.lane} on ${nodeName(span.nodeId)}`;
  return item.durationUs === null
    ? `${span.name}, ${where}: instant at +${formatMs(item.offsetUs)}`
    : `${span.name}, ${where}: starts at +${formatMs(item.offsetUs)}, lasts ${formatMs(item.durationUs)}`;
}

function argValue(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function details(item, nodeName) {
  if (!item) return h("p", { class: "muted" }, "Select a span to see its details.");
  const { span } = item;
  const args = Object.entries(span.args || {});
  return [
    h("h3", null, span.name),
    h(
      "dl",
      { class: "facts" },
      h("dt", null, "Node"),
      h("dd", null, nodeName(span.nodeId), " ", h("code", { class: "muted" }, span.nodeId)),
      h("dt", null, "Lane"),
      h("dd", null, span.lane),
      h("dt", null, "Starts"),
      h("dd", null, `+${formatMs(item.offsetUs)}`),
      h("dt", null, "Duration"),
      h("dd", null, item.durationUs === null ? "instant" : formatMs(item.durationUs)),
      args.map(([k, v]) => [h("dt", null, k), h("dd", null, argValue(v))]),
    ),
  ];
}

/** The timeline of `record` as a DOM subtree; `nodeName(id)` names a node for people. */
export function renderTimeline(record, { nodeName = (id) => id } = {}) {
  const layout = layoutTrace(record);
  const detailBox = h("div", { class: "span-details", "aria-live": "polite" });
  const buttons = [];
  let selected = -1;

  const select = (index, { focus = true } = {}) => {
    if (index < 0 || index >= buttons.length) return;
    if (selected >= 0) {
      buttons[selected].tabIndex = -1;
      buttons[selected].setAttribute("aria-pressed", "false");
    }
    selected = index;
    const button = buttons[index];
    button.tabIndex = 0;
    button.setAttribute("aria-pressed", "true");
    if (focus) button.focus();
    replace(detailBox, details(layout.items[index], nodeName));
  };

  // The rows as drawn, top to bottom (a lane's stacked rows in turn): Up/Down move
  // to the nearest span in time on the row above/below.
  const visualRows = layout.lanes.flatMap((lane) => Array.from({ length: lane.depth }, (_, r) => lane.items.filter((i) => i.row === r)));
  const rowOf = new Map(visualRows.flatMap((row, r) => row.map((item) => [item.index, r])));
  const nearestInRow = (rowIndex, offsetUs) => {
    const row = visualRows[rowIndex];
    if (!row || !row.length) return -1;
    let best = row[0];
    for (const item of row) if (Math.abs(item.offsetUs - offsetUs) < Math.abs(best.offsetUs - offsetUs)) best = item;
    return best.index;
  };

  const onKey = (event) => {
    // From the focused span (it may not be selected yet: Tab lands on the first).
    const current = buttons.indexOf(event.target);
    if (current < 0) return;
    const item = layout.items[current];
    let next = null;
    if (event.key === "ArrowRight") next = current + 1;
    else if (event.key === "ArrowLeft") next = current - 1;
    else if (event.key === "Home") next = 0;
    else if (event.key === "End") next = buttons.length - 1;
    else if (event.key === "ArrowDown") next = nearestInRow(rowOf.get(item.index) + 1, item.offsetUs);
    else if (event.key === "ArrowUp") next = nearestInRow(rowOf.get(item.index) - 1, item.offsetUs);
    if (next === null) return;
    event.preventDefault();
    if (next >= 0 && next < buttons.length) select(next);
  };

  for (const item of layout.items) {
    const instant = item.durationUs === null;
    const button = h(
      "button",
      {
        type: "button",
        class: ["span-bar", instant ? "instant" : null],
        tabindex: "-1",
        "aria-pressed": "false",
        "aria-label": spanLabel(item, nodeName),
        onClick: () => select(item.index),
      },
      h("span", { class: "span-name", "aria-hidden": "true" }, item.span.name),
    );
    // Position through the CSSOM (the CSP refuses style attributes, not this).
    button.style.left = `${pct(item.offsetUs, layout.totalUs)}%`;
    button.style.top = `${0.2 + item.row * ROW_REM}rem`;
    if (!instant) button.style.width = `${pct(item.durationUs, layout.totalUs)}%`;
    button.title = `${item.span.name}: ${instant ? "instant" : formatMs(item.durationUs)}`;
    buttons.push(button);
  }
  if (buttons.length) buttons[0].tabIndex = 0;

  const axis = h(
    "div",
    { class: "trace-axis", "aria-hidden": "true" },
    ticks(layout.totalUs).map((t) => {
      const tick = h("span", { class: "trace-tick" }, formatMs(t));
      tick.style.left = `${pct(t, layout.totalUs)}%`;
      return tick;
    }),
  );

  let lastNode = null;
  const rows = layout.lanes.map((lane) => {
    const firstOfNode = lane.nodeId !== lastNode;
    lastNode = lane.nodeId;
    const track = h(
      "div",
      { class: "trace-track", role: "group", "aria-label": `${lane.lane} on ${nodeName(lane.nodeId)}` },
      lane.items.map((item) => buttons[item.index]),
    );
    track.style.height = `${0.3 + lane.depth * ROW_REM}rem`;
    return h(
      "div",
      { class: ["trace-row", firstOfNode ? "node-start" : null] },
      h("div", { class: "trace-lane" }, firstOfNode ? h("strong", null, nodeName(lane.nodeId)) : null, h("span", null, lane.lane)),
      track,
    );
  });

  const spansGroup = h(
    "div",
    { class: "trace-timeline", role: "group", "aria-label": "Spans on a time axis", onKeydown: onKey },
    h("div", { class: "trace-row trace-axis-row" }, h("div", { class: "trace-lane muted" }, "Node · lane"), axis),
    rows,
  );
  return {
    element: h(
      "div",
      null,
      layout.items.length
        ? [
            h("p", { class: "muted" }, `${layout.items.length} span${layout.items.length === 1 ? "" : "s"} over ${formatMs(layout.totalUs)}. Tab to the spans, then use the arrow keys to move between them.`),
            h("div", { class: "table-wrap" }, spansGroup),
            detailBox,
          ]
        : h("p", { class: "muted" }, "This trace has no spans."),
    ),
    layout,
    select,
  };
}
