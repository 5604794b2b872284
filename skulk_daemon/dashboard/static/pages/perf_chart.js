// A small SVG chart of one performance envelope: aggregate decode throughput (solid,
// left axis) and p50 time to first token (dashed, right axis) against concurrency,
// with the knee marked. SVG geometry is attributes, never style, so the CSP holds.
import { h } from "../dom.js";

const W = 560;
const H = 230;
const PAD = { left: 52, right: 58, top: 16, bottom: 40 };

/** A rounded-up axis maximum (1/2/2.5/5 × 10^k) so the gridlines read cleanly. */
export function niceMax(value) {
  if (!(value > 0)) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  const step = [1, 2, 2.5, 5, 10].find((m) => m * magnitude >= value);
  return step * magnitude;
}

const fmt = (v) => (v >= 100 ? String(Math.round(v)) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

/** The chart's points, pure: x/y in SVG units for each bucket. */
export function chartPoints(buckets) {
  const sorted = [...buckets].sort((a, b) => a.concurrency - b.concurrency);
  const cMin = sorted.length ? sorted[0].concurrency : 1;
  const cMax = sorted.length ? sorted[sorted.length - 1].concurrency : 1;
  const tpsMax = niceMax(Math.max(0, ...sorted.map((b) => b.aggregateDecodeTps)));
  const ttftMax = niceMax(Math.max(0, ...sorted.map((b) => b.p50TtftMs)));
  const innerW = W - PAD.left - PAD.right;
  const innerH = H - PAD.top - PAD.bottom;
  const x = (c) => (cMax === cMin ? PAD.left + innerW / 2 : PAD.left + ((c - cMin) / (cMax - cMin)) * innerW);
  const yTps = (v) => PAD.top + innerH - (v / tpsMax) * innerH;
  const yTtft = (v) => PAD.top + innerH - (v / ttftMax) * innerH;
  return {
    cMin,
    cMax,
    tpsMax,
    ttftMax,
    x,
    points: sorted.map((b) => ({ bucket: b, x: x(b.concurrency), yTps: yTps(b.aggregateDecodeTps), yTtft: yTtft(b.p50TtftMs) })),
  };
}

/** The chart as an <svg role="img"> named `label`, with its legend beside it. */
export function envelopeChart(envelope, label) {
  const { cMin, cMax, tpsMax, ttftMax, x, points } = chartPoints(envelope.buckets || []);
  const innerH = H - PAD.top - PAD.bottom;
  const bottom = PAD.top + innerH;
  const grid = [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const y = PAD.top + innerH - f * innerH;
    return h(
      "g",
      null,
      h("line", { class: "chart-grid", x1: PAD.left, x2: W - PAD.right, y1: y, y2: y }),
      h("text", { class: "chart-label tps", x: PAD.left - 6, y: y + 4, "text-anchor": "end" }, fmt(f * tpsMax)),
      h("text", { class: "chart-label ttft", x: W - PAD.right + 6, y: y + 4, "text-anchor": "start" }, fmt(f * ttftMax)),
    );
  });
  const concurrencies = [...new Set(points.map((p) => p.bucket.concurrency))];
  const xTicks = concurrencies.length <= 12 ? concurrencies : [cMin, Math.round((cMin + cMax) / 2), cMax];
  const polyline = (key, cls) =>
    points.length > 1 ? h("polyline", { class: cls, points: points.map((p) => `${p.x.toFixed(1)},${p[key].toFixed(1)}`).join(" ") }) : null;
  const knee = envelope.kneeConcurrency;
  return h(
    "figure",
    { class: "perf-chart" },
    h(
      "svg",
      { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, preserveAspectRatio: "xMidYMid meet" },
      h("title", null, label),
      grid,
      h("line", { class: "chart-axis", x1: PAD.left, x2: W - PAD.right, y1: bottom, y2: bottom }),
      xTicks.map((c) => h("text", { class: "chart-label", x: x(c), y: bottom + 16, "text-anchor": "middle" }, String(c))),
      h("text", { class: "chart-label", x: PAD.left + (W - PAD.left - PAD.right) / 2, y: H - 6, "text-anchor": "middle" }, "requests in flight (concurrency)"),
      knee != null && knee >= cMin && knee <= cMax ? h("line", { class: "chart-knee", x1: x(knee), x2: x(knee), y1: PAD.top, y2: bottom }) : null,
      polyline("yTps", "chart-line tps"),
      polyline("yTtft", "chart-line ttft"),
      points.map((p) => [
        h("circle", { class: "chart-dot tps", cx: p.x, cy: p.yTps, r: 4 }, h("title", null, `concurrency ${p.bucket.concurrency}: ${fmt(p.bucket.aggregateDecodeTps)} tok/s aggregate`)),
        h("rect", { class: "chart-dot ttft", x: p.x - 3.5, y: p.yTtft - 3.5, width: 7, height: 7 }, h("title", null, `concurrency ${p.bucket.concurrency}: p50 first token ${fmt(p.bucket.p50TtftMs)} ms`)),
      ]),
    ),
    h(
      "figcaption",
      { class: "chart-legend" },
      h("span", { class: "legend tps" }, "Aggregate decode tokens/s (left axis)"),
      h("span", { class: "legend ttft" }, "p50 time to first token, ms (right axis)"),
      knee != null ? h("span", { class: "legend knee" }, `Knee: throughput stops rising past ${knee}`) : null,
    ),
  );
}
