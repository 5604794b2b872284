// Small DOM helpers. Server text only ever enters the page as text nodes or attribute
// values set through the DOM: nothing here (or in any page) assigns innerHTML.

const SVG_NS = "http://www.w3.org/2000/svg";
const SVG_TAGS = new Set(["svg", "g", "line", "path", "circle", "rect", "text", "title", "polyline"]);

function apply(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "class") {
      el.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    } else if (key === "dataset") {
      Object.assign(el.dataset, value);
    } else if (key === "value" && "value" in el) {
      el.value = value;
    } else if (key === "checked" || key === "disabled" || key === "selected") {
      el[key] = Boolean(value);
      if (value) el.setAttribute(key, "");
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** h("button", {type: "button", onClick}, "Label") — an element with attributes and
 * children (strings become text nodes; arrays flatten; null/false are skipped). */
export function h(tag, attrs, ...children) {
  const el = SVG_TAGS.has(tag) ? document.createElementNS(SVG_NS, tag) : document.createElement(tag);
  apply(el, attrs);
  append(el, children);
  return el;
}

/** Replace everything inside `el` with `children`. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A byte count for people: 1.5 GB, 320 MB. */
export function formatBytes(bytes) {
  if (typeof bytes !== "number" || !Number.isFinite(bytes)) return "—";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${value >= 10 || unit === 0 ? Math.round(value) : value.toFixed(1)} ${units[unit]}`;
}

/** "3 s ago", "2 min ago" from an ISO time (or a Date). */
export function formatAge(when, now = Date.now()) {
  const t = when instanceof Date ? when.getTime() : Date.parse(when);
  if (!Number.isFinite(t)) return "—";
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

/** A status line for errors: role=alert so screen readers hear it. */
export function errorBox(message, retry) {
  return h(
    "div",
    { class: "error-box", role: "alert" },
    h("p", null, message),
    retry ? h("button", { type: "button", onClick: retry }, "Retry") : null,
  );
}
