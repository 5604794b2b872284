// The dashboard shell: header, nav, connection indicator, client-side routing.
//
// THE PAGE CONTRACT (every page follows it; docs/architecture.md "Dashboard" says the same)
//
//   A page is `static/pages/<name>.js` exporting
//
//       export async function mount(root, ctx) { ...; return () => { /* cleanup */ }; }
//
//   It renders into `root` (an empty element inside <main>) and returns a cleanup
//   function (or nothing). It is unmounted when the route changes: its cleanup runs and
//   `ctx.signal` is aborted, so fetches and streams started with it stop.
//
//   ctx = {
//     api,      // static/api.js: get/post/put/del(path[, body], {signal}) -> parsed JSON,
//               // throwing ApiError {status, message, code}; stream(path, body,
//               // {signal, onEvent}) for SSE POSTs; events(path, {signal, onEvent}) for
//               // GET SSE. Every call takes {signal, headers} (e.g. the pairing
//               // routes' X-Skulk-Dashboard: pairing-v1). Same origin, public API
//               // only, same authority as any client.
//     live,     // static/live.js: the cluster /state, polled with backoff, paused while
//               // the tab is hidden. live.subscribe(fn) -> unsubscribe; live.state;
//               // live.refresh() after a mutation; live.onStatus(fn) -> unsubscribe.
//     navigate, // navigate("/node/abc"): client-side, pushes history.
//     params,   // path params of the route, e.g. {id} for /node/:id (decoded).
//     query,    // URLSearchParams of the current URL.
//     signal,   // AbortSignal, aborted on unmount.
//   }
//
//   Rules: build DOM with static/dom.js `h()` (server text always as text nodes, never
//   innerHTML); no inline script or style (the CSP refuses them); name controls with
//   visible labels or aria-label (tests drive the page by role and accessible name);
//   set document.title via the route's `title`. Register the page in ROUTES below.

import { api, ApiError } from "./api.js";
import { h, replace } from "./dom.js";
import { Connection, createLive } from "./live.js";
import { trapDialogFocus } from "./focus_trap.js";

/** The route table: path pattern (":name" segments are params) -> page module and
 * title. The server answers index.html for each of these paths
 * (skulk_daemon/api/dashboard.py PAGE_PATHS keeps the same list). */
export const ROUTES = [
  { path: "/", page: "cluster", title: "Cluster", nav: "cluster" },
  { path: "/cluster", page: "cluster", title: "Cluster", nav: "cluster" },
  { path: "/node/:id", page: "node", title: "Node diagnostics", nav: "cluster" },
  { path: "/catalog", page: "models", title: "Models", nav: "catalog" },
  { path: "/chat", page: "chat", title: "Chat", nav: "chat" },
  { path: "/downloads", page: "downloads", title: "Downloads", nav: "downloads" },
  { path: "/traces", page: "traces", title: "Traces", nav: "traces" },
  { path: "/traces/:id", page: "traces", title: "Trace", nav: "traces" },
  { path: "/performance", page: "performance", title: "Performance", nav: "performance" },
  { path: "/plugins", page: "plugins", title: "Plugins", nav: "plugins" },
  { path: "/settings", page: "settings", title: "Settings", nav: null },
];

export function match(pathname) {
  const parts = pathname.replace(/\/+$/, "").split("/").filter(Boolean);
  for (const route of ROUTES) {
    const pattern = route.path.split("/").filter(Boolean);
    if (pattern.length !== parts.length) continue;
    const params = {};
    let ok = true;
    for (let i = 0; i < pattern.length; i += 1) {
      if (pattern[i].startsWith(":")) {
        try {
          params[pattern[i].slice(1)] = decodeURIComponent(parts[i]);
        } catch {
          ok = false;
        }
      } else if (pattern[i] !== parts[i]) ok = false;
      if (!ok) break;
    }
    if (ok) return { route, params };
  }
  return null;
}

const main = document.getElementById("main");
const live = createLive({ fetchJson: api.get });
let current = null; // {cleanup, controller}
let generation = 0;

async function unmountCurrent() {
  const previous = current;
  current = null;
  if (!previous) return;
  previous.controller.abort();
  try {
    if (typeof previous.cleanup === "function") await previous.cleanup();
  } catch (error) {
    console.warn("page cleanup failed", error);
  }
}

function notFound(root, pathname) {
  replace(
    root,
    h("h1", null, "Page not found"),
    h("p", null, "Nothing on this dashboard lives at ", h("code", null, pathname), "."),
    h("p", null, h("a", { href: "/cluster" }, "Go to the cluster")),
  );
}

function markNav(navName) {
  for (const link of document.querySelectorAll("nav [data-nav]")) {
    if (link.dataset.nav === navName) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

async function render({ focus = false } = {}) {
  const mine = ++generation;
  await unmountCurrent();
  if (mine !== generation) return;
  const { pathname } = window.location;
  const found = match(pathname);
  const root = h("div", { class: "page" });
  replace(main, root);
  if (!found) {
    document.title = "Not found · Skulk";
    markNav(null);
    notFound(root, pathname);
    announce("Page not found");
    return;
  }
  const { route, params } = found;
  document.title = `${route.title} · Skulk`;
  markNav(route.nav);
  const controller = new AbortController();
  current = { cleanup: null, controller };
  try {
    const module = await import(`./pages/${route.page}.js`);
    if (mine !== generation) return;
    const ctx = { api, live, navigate, params, query: new URLSearchParams(window.location.search), signal: controller.signal };
    current.cleanup = await module.mount(root, ctx);
  } catch (error) {
    if (controller.signal.aborted) return;
    console.error(error);
    replace(root, h("h1", null, route.title), h("div", { class: "error-box", role: "alert" }, h("p", null, `This page failed to load: ${error.message}`)));
  }
  announce(route.title);
  if (focus) main.focus({ preventScroll: true });
}

function announce(text) {
  const el = document.getElementById("route-announcer");
  if (el) el.textContent = text;
}

export function navigate(path, { replace: replaceEntry = false } = {}) {
  const url = new URL(path, window.location.origin);
  if (url.origin !== window.location.origin) {
    window.location.assign(url.href);
    return;
  }
  if (replaceEntry) history.replaceState(null, "", url.pathname + url.search + url.hash);
  else history.pushState(null, "", url.pathname + url.search + url.hash);
  closeNav();
  render({ focus: true });
}

// Same-origin links inside the app route client-side (modifier clicks keep the browser's).
document.addEventListener("click", (event) => {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const link = event.target.closest("a[href]");
  if (!link || link.target || link.hasAttribute("download")) return;
  const url = new URL(link.href, window.location.href);
  if (url.origin !== window.location.origin || !match(url.pathname)) return;
  event.preventDefault();
  navigate(url.pathname + url.search + url.hash);
});
window.addEventListener("popstate", () => render({ focus: true }));

// Collapsible nav (narrow viewports).
const navToggle = document.getElementById("nav-toggle");
function closeNav() {
  navToggle.setAttribute("aria-expanded", "false");
  document.body.classList.remove("nav-open");
}
navToggle.addEventListener("click", () => {
  const open = navToggle.getAttribute("aria-expanded") !== "true";
  navToggle.setAttribute("aria-expanded", String(open));
  document.body.classList.toggle("nav-open", open);
});

// Settings: a dialog over the current page, holding the settings page (same contract).
const dialog = document.getElementById("settings-dialog");
const settingsBody = document.getElementById("settings-body");
let settingsMounted = null;
async function openSettings() {
  closeNav();
  const controller = new AbortController();
  const root = h("div", { class: "page" });
  replace(settingsBody, root);
  dialog.showModal();
  try {
    const module = await import("./pages/settings.js");
    const ctx = { api, live, navigate, params: {}, query: new URLSearchParams(), signal: controller.signal, dialog: true };
    settingsMounted = { controller, cleanup: await module.mount(root, ctx) };
  } catch (error) {
    console.error(error);
    replace(root, h("div", { class: "error-box", role: "alert" }, h("p", null, `Settings failed to load: ${error.message}`)));
    settingsMounted = { controller, cleanup: null };
  }
}
async function closeSettings() {
  const mounted = settingsMounted;
  settingsMounted = null;
  if (mounted) {
    mounted.controller.abort();
    if (typeof mounted.cleanup === "function") await mounted.cleanup();
  }
  settingsBody.replaceChildren();
}
document.getElementById("settings-button").addEventListener("click", openSettings);
document.getElementById("settings-close").addEventListener("click", () => dialog.close());
dialog.addEventListener("close", closeSettings);

// Header: connection indicator and the cluster's name (its master's friendly name).
const connection = document.getElementById("connection");
const CONNECTION_TEXT = {
  [Connection.CONNECTING]: "Connecting…",
  [Connection.CONNECTED]: "Connected",
  [Connection.RECONNECTING]: "Reconnecting…",
  [Connection.UNREACHABLE]: "Node unreachable, retrying",
};
live.onStatus((status, error) => {
  connection.dataset.state = status;
  const text = connection.querySelector(".connection-text");
  text.textContent = CONNECTION_TEXT[status];
  connection.title = error instanceof ApiError ? error.message : "";
});
live.subscribe((state) => {
  const count = (state.topology?.nodes || []).length;
  const master = state.masterNodeId ? state.nodeIdentities?.[state.masterNodeId]?.friendlyName : null;
  const name = master ? `${master} · ${count} node${count === 1 ? "" : "s"}` : `${count} node${count === 1 ? "" : "s"}`;
  document.getElementById("cluster-name").textContent = name;
});

trapDialogFocus();
live.start();
render();
// First run: a welcome over the landing page until this node's onboarding is complete.
import("./pages/onboarding.js").then((m) => m.offer({ api })).catch((error) => console.warn("onboarding", error));
