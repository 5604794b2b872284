// Plugins: the installed inventory (GET /v1/plugins), managed installations
// (GET /v1/plugins/managed) and their lifecycle, each a separate explicit step with its
// own button: Review release, Install release, Activate (after accepting the reviewed
// permissions), Configure, Disable. Retained operations are polled with backoff, never
// resubmitted. Every call carries X-Skulk-Dashboard: pairing-v1 (the direct owner
// boundary); refusals are shown as what to do. Follows the page contract in app.js.
import { h, replace, errorBox, formatBytes } from "../dom.js";
import { configureForm } from "./plugins_configure.js";

const OWNER = { headers: { "X-Skulk-Dashboard": "pairing-v1" } };
const TERMINAL_INSTALL = new Set(["staged", "recovery_required"]);
const PENDING_OPERATION = new Set(["accepted", "applying"]); // the manager's OperationState
const POLL_FIRST_MS = 1000;
const POLL_MAX_MS = 15000;

/** A refusal in the API's words, plus where to go next when the API's own message
 * does not already say it. */
export function guidance(error) {
  const message = ((error && error.message) || "The request failed").trim();
  const said = /[.!?]$/.test(message) ? message : `${message}.`;
  const next = {
    401: [/localhost|tailscale/i, "Plugins are managed by the node's owner: open this page in a browser on the node itself (http://localhost:<port>/plugins) or over Tailscale by its MagicDNS name, or use a paired device granted plugin access."],
    403: [/localhost|tailscale/i, "Plugins are managed by the node's owner: open this page in a browser on the node itself (http://localhost:<port>/plugins) or over Tailscale by its MagicDNS name, or use a paired device granted plugin access."],
    404: [/^$/, "It may have been removed; reload the inventory."],
    409: [/reload/i, "Something changed since this was read: reload, review again, then retry."],
    429: [/retry|wait/i, "The plugin manager is busy; wait a moment and retry."],
    503: [/skulk-plugin-service/i, 'The local plugin manager is not set up or not answering: run "skulk-plugin-service setup" on this host, then reload.'],
    504: [/^$/, "The local plugin manager did not answer in time; reload to read what it did."],
  }[error && error.status];
  return next && !next[0].test(message) ? `${said} ${next[1]}` : said;
}

function operationId() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

const path = (id) => `/v1/plugins/managed/installations/${encodeURIComponent(id)}`;

export async function mount(root, ctx) {
  const { api, signal } = ctx;
  const live = h("p", { class: "sr-only", "aria-live": "polite" });
  const inventoryHost = h("section", { "aria-labelledby": "plugins-installed" });
  const managedHost = h("section", { "aria-labelledby": "plugins-managed" });
  const timers = new Set();
  replace(
    root,
    h("h1", null, "Plugins"),
    h("p", { class: "muted" }, "Plugins add capabilities to this node. Each change is its own step: review a release, install it, accept its permissions and activate it, configure it, disable it."),
    inventoryHost,
    managedHost,
    live,
  );

  const wait = (ms) =>
    new Promise((resolve) => {
      const timer = setTimeout(() => {
        timers.delete(timer);
        resolve();
      }, ms);
      timers.add(timer);
    });

  /** Reads `read()` until `done(answer)`, backing off 1 s → 15 s; the answer shown
   * through `show` each time. Never repeats the mutation itself. */
  const poll = async (read, done, show) => {
    let delay = POLL_FIRST_MS;
    while (!signal.aborted) {
      try {
        const answer = await read();
        show(answer);
        if (done(answer)) return answer;
      } catch (error) {
        if (error.name === "AbortError") return null;
        show(null, error);
      }
      await wait(delay);
      delay = Math.min(POLL_MAX_MS, delay * 2);
    }
    return null;
  };

  const loadInventory = async () => {
    replace(inventoryHost, h("h2", { id: "plugins-installed" }, "Installed plugins"), h("p", { class: "muted" }, "Loading…"));
    try {
      const inventory = await api.get("/v1/plugins", { signal, ...OWNER });
      const plugins = inventory.plugins || [];
      replace(
        inventoryHost,
        h("h2", { id: "plugins-installed" }, "Installed plugins"),
        plugins.length
          ? h("ul", { class: "plugin-list" }, plugins.map((plugin) => inventoryItem(plugin)))
          : h("p", { class: "empty" }, "No plugins are installed on this node."),
      );
    } catch (error) {
      if (error.name === "AbortError") return;
      replace(inventoryHost, h("h2", { id: "plugins-installed" }, "Installed plugins"), errorBox(guidance(error), loadInventory));
    }
  };

  const inventoryItem = (plugin) => {
    const panel = h("div", { class: "plugin-panel" });
    return h(
      "li",
      { class: "plugin-card" },
      h("h3", null, plugin.pluginId),
      plugin.available ? null : h("p", { class: "notice" }, "Its manager is not answering: what is shown may be stale."),
      h(
        "ul",
        { class: "plugin-nodes" },
        (plugin.nodes || []).map((node) =>
          h(
            "li",
            null,
            h("span", null, `${node.bundleId || node.nodeId}${node.version ? ` ${node.version}` : ""} · ${node.status}`),
            node.configurable
              ? h("button", { type: "button", onClick: () => configureForm(panel, { api, signal, owner: OWNER, pluginId: plugin.pluginId, nodeId: node.nodeId, guidance, announce }) }, `Configure ${plugin.pluginId}`)
              : null,
          ),
        ),
      ),
      panel,
    );
  };

  const announce = (text) => {
    live.textContent = text;
  };

  const loadManaged = async () => {
    replace(managedHost, h("h2", { id: "plugins-managed" }, "Managed installations"), h("p", { class: "muted" }, "Loading…"));
    try {
      const managed = await api.get("/v1/plugins/managed", { signal, ...OWNER });
      const rows = managed.installations || [];
      replace(
        managedHost,
        h("h2", { id: "plugins-managed" }, "Managed installations"),
        rows.length ? h("ul", { class: "plugin-list" }, rows.map((row) => managedItem(row))) : h("p", { class: "empty" }, "No managed installations yet."),
      );
    } catch (error) {
      if (error.name === "AbortError") return;
      replace(managedHost, h("h2", { id: "plugins-managed" }, "Managed installations"), h("div", { class: "notice", role: "alert" }, h("p", null, guidance(error)), h("button", { type: "button", onClick: loadManaged }, "Retry")));
    }
  };

  const managedItem = (row) => {
    const id = row.plugin_id;
    const steps = h("div", { class: "plugin-panel", "aria-live": "polite" });
    const state = h("p", null, stateText(row));
    let review = null;
    const fail = (error) => replace(steps, h("div", { class: "error-box", role: "alert" }, h("p", null, guidance(error))));

    const showReview = async () => {
      replace(steps, h("p", null, "Reading the signed release…"));
      try {
        review = await api.get(`${path(id)}/release`, { signal, ...OWNER });
        const accept = h("input", { type: "checkbox", id: `accept-${id}` });
        replace(
          steps,
          h(
            "dl",
            { class: "facts", "aria-label": `Release review for ${id}` },
            [
              ["Bundle", `${review.bundle_id} ${review.version} (sequence ${review.sequence})`],
              ["Signer", review.publisher],
              ["Platforms", `${review.platform} · Python ${review.python_requires}`],
              ["Permissions", review.permissions.length ? review.permissions.join(", ") : "none"],
              ["Size", formatBytes(review.artifact_bytes)],
              ["Signature expires", new Date(review.expires_at * 1000).toLocaleString()],
            ].map(([k, v]) => [h("dt", null, k), h("dd", null, v)]),
          ),
          h("div", { class: "form-actions" }, h("button", { type: "button", onClick: () => install() }, `Install release ${id}`)),
          h("div", { class: "field field-check" }, accept, h("label", { for: `accept-${id}` }, `Accept these permissions for ${id}`)),
          h("div", { class: "form-actions" }, h("button", { type: "button", onClick: () => (accept.checked ? lifecycle("activate") : replace(steps.lastChild, h("p", { role: "alert" }, "Tick \u201cAccept these permissions\u201d first."))) }, `Activate ${id}`)),
          h("div", null),
        );
      } catch (error) {
        if (error.name !== "AbortError") fail(error);
      }
    };

    const install = async () => {
      if (!review) return;
      try {
        await api.post(`${path(id)}/install`, { operation_id: operationId(), runtime_digest: review.runtime_digest, expected_source_revision: review.source_revision }, { signal, ...OWNER });
        announce(`Installing ${id}…`);
        await poll(
          () => api.get(`${path(id)}/install`, { signal, ...OWNER }),
          (answer) => answer && answer.operation && TERMINAL_INSTALL.has(answer.operation.state),
          (answer, error) => {
            if (error) state.textContent = `Install status unknown (${guidance(error)}); still checking.`;
            else if (answer && answer.operation) state.textContent = `Install: ${answer.operation.state}, ${formatBytes(answer.operation.downloaded_bytes)}${answer.operation.error_code ? ` (${answer.operation.error_code})` : ""}`;
          },
        );
        await loadManaged();
      } catch (error) {
        if (error.name !== "AbortError") fail(error);
      }
    };

    const lifecycle = async (action) => {
      const body = { operation_id: operationId(), action, expected_revision: row.selection_revision };
      if (action === "activate") {
        body.runtime_digest = review ? review.runtime_digest : row.selected_digest;
        body.accept_permissions = true;
      }
      try {
        const op = await api.post(`${path(id)}/operations`, body, { signal, ...OWNER });
        announce(`${action} ${id}: ${op.state}`);
        await poll(
          () => api.get(`${path(id)}/operations/${op.operation_id}`, { signal, ...OWNER }),
          (answer) => answer && !PENDING_OPERATION.has(answer.state),
          (answer, error) => {
            state.textContent = error ? `Status unknown (${guidance(error)}); still checking.` : `${action}: ${answer.state}${answer.error_code ? ` (${answer.error_code})` : ""}`;
          },
        );
        await loadManaged();
      } catch (error) {
        if (error.name !== "AbortError") fail(error);
      }
    };

    const recover = async (opId) => {
      try {
        await api.post(`${path(id)}/operations/${encodeURIComponent(opId)}/recover`, undefined, { signal, ...OWNER });
        announce(`Recovering ${id}…`);
        await poll(
          () => api.get(`${path(id)}/operations/${encodeURIComponent(opId)}`, { signal, ...OWNER }),
          (answer) => answer && !PENDING_OPERATION.has(answer.state),
          (answer, error) => {
            state.textContent = error ? `Status unknown (${guidance(error)}); still checking.` : `recover: ${answer.state}`;
          },
        );
        await loadManaged();
      } catch (error) {
        if (error.name !== "AbortError") fail(error);
      }
    };

    return h(
      "li",
      { class: "plugin-card" },
      h("h3", null, row.release?.title || id),
      state,
      row.stale ? h("p", { class: "notice" }, "Stale observation: the manager could not confirm this just now.") : null,
      h(
        "div",
        { class: "form-actions" },
        h("button", { type: "button", onClick: showReview }, `Review release ${id}`),
        row.enabled || row.operation_state === "recovery_required" ? h("button", { type: "button", onClick: () => lifecycle("disable") }, `Disable ${id}`) : null,
        row.operation_id && row.operation_state === "recovery_required"
          ? h("button", { type: "button", onClick: () => recover(row.operation_id) }, `Recover operation for ${id}`)
          : null,
      ),
      row.operation_state === "recovery_required"
        ? h("p", { class: "notice" }, "This activation needs recovery. Recover resumes only the retained intent once its fault is fixed; Disable withdraws the local intent without running the release.")
        : null,
      steps,
    );
  };

  await Promise.all([loadInventory(), loadManaged()]);
  return () => {
    for (const timer of timers) clearTimeout(timer);
    timers.clear();
  };
}

function stateText(row) {
  const release = row.release ? `${row.release.bundle_id} ${row.release.bundle_version} by ${row.release.publisher}` : "no release selected";
  const op = row.operation_state ? ` · last operation ${row.operation_state}` : "";
  return `${row.enabled ? "Enabled" : "Disabled"} · ${release}${op}${row.error_code ? ` · ${row.error_code}` : ""}`;
}
