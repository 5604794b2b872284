// Settings: the node's configuration (GET/PUT /config) as a form grouped by section,
// then Devices & pairing (settings_pairing.js). Opened as a dialog by the shell's
// "Settings" button, or at /settings. Follows the page contract in static/app.js.
//
// Secrets are write-only: the form shows whether each is set and a blank password box
// (blank keeps the stored value). Trust keys (GET /config's editing.trust_keys) are
// disabled with the API's reason when this browser may not change them. Save sends the
// whole configuration, as PUT /config asks, and shows its refusals beside the fields.
import { h, replace, errorBox } from "../dom.js";
import { describe, field, labelFor, schemaAt, secretField } from "./settings_fields.js";
import { mountPairing } from "./settings_pairing.js";

/** Sections not offered for editing: deprecated compatibility state PUT /config keeps
 * when the request omits it (the spec retired the Model trust editor; every
 * experiment has graduated). */
const HIDDEN_SECTIONS = new Set(["model_trust", "experiments"]);

/** The top-level keys that are not sections, shown in a "General" group. */
const GENERAL = "General";

function clone(value) {
  return JSON.parse(JSON.stringify(value));
}

function setAt(document, path, value) {
  let target = document;
  for (const name of path.slice(0, -1)) {
    if (!target[name] || typeof target[name] !== "object") target[name] = {};
    target = target[name];
  }
  target[path[path.length - 1]] = value;
}

/** The dotted key a refusal names: 422 "invalid value for 'a.b'", "unknown
 * configuration key 'a.b'", 403 "changing a.b, c.d is accepted only ...". */
export function keysNamed(message) {
  const quoted = [...message.matchAll(/'([a-z_][a-z0-9_.]*)'/g)].map((m) => m[1]);
  if (quoted.length) return quoted;
  const changing = message.match(/^changing (.+?) is accepted/);
  return changing ? changing[1].split(/,\s*/) : [];
}

export async function mount(root, ctx) {
  const { api, signal } = ctx;
  const status = h("div", { class: "settings-status", role: "status", "aria-live": "polite" });
  const formHost = h("div", { class: "settings-form-host" }, h("p", { class: "muted" }, "Loading settings…"));
  const pairingHost = h("section", { class: "settings-pairing", "aria-labelledby": "pairing-heading" });
  replace(root, ctx.dialog ? null : h("h1", null, "Settings"), formHost, status, pairingHost);

  let controls = []; // {path, dotted, read, setError, clear?, secret}
  let loaded = null;

  const render = (answer, openapi) => {
    loaded = answer;
    controls = [];
    const editing = answer.editing || { trust_keys: [], trust_editable: true, trust_reason: null, secrets: {}, restart_keys: [] };
    const trust = new Set(editing.trust_keys);
    const restart = new Set(editing.restart_keys);
    const secrets = editing.secrets || {};
    const reasonId = "settings-trust-reason";
    const locked = !editing.trust_editable;
    const groups = new Map([[GENERAL, []]]);
    const addControl = (path, value) => {
      const dotted = path.join(".");
      const id = `setting-${dotted.replace(/\./g, "-")}`;
      const isTrust = trust.has(dotted);
      const disabled = isTrust && locked;
      const describedBy = disabled ? reasonId : null;
      if (dotted in secrets) {
        const control = secretField({ id, key: path[path.length - 1], isSet: Boolean(secrets[dotted]), disabled, describedBy, list: Array.isArray(value) || dotted === "api.keys" });
        controls.push({ path, dotted, secret: true, ...control });
        return control.row;
      }
      const facts = describe(schemaAt(openapi, path), value);
      const hint = [isTrust ? "Trust setting: localhost or the operator gateway only." : null, restart.has(dotted) ? "Takes effect after a restart." : null].filter(Boolean).join(" ");
      const control = field({ id, key: path[path.length - 1], value, facts, disabled, describedBy, hint: hint || null });
      controls.push({ path, dotted, secret: false, ...control });
      return control.row;
    };
    const section = (path, values) => {
      const rows = [];
      const children = [];
      const keys = new Set(Object.keys(values));
      for (const dotted of Object.keys(secrets)) {
        const parts = dotted.split(".");
        if (parts.length === path.length + 1 && parts.slice(0, -1).join(".") === path.join(".")) keys.add(parts[parts.length - 1]);
      }
      for (const key of keys) {
        const value = values[key];
        if (value && typeof value === "object" && !Array.isArray(value)) children.push(section([...path, key], value));
        else rows.push(addControl([...path, key], value ?? null));
      }
      return h("fieldset", { class: "settings-group" }, h("legend", null, labelFor(path[path.length - 1])), rows, children);
    };
    const sections = [];
    const config = answer.config || {};
    const topKeys = new Set(Object.keys(config));
    for (const dotted of Object.keys(secrets)) if (!dotted.includes(".")) topKeys.add(dotted);
    for (const key of topKeys) {
      if (HIDDEN_SECTIONS.has(key)) continue;
      const value = config[key];
      if (value && typeof value === "object" && !Array.isArray(value)) sections.push(section([key], value));
      else groups.get(GENERAL).push(addControl([key], value ?? null));
    }
    const general = groups.get(GENERAL).length ? h("fieldset", { class: "settings-group" }, h("legend", null, GENERAL), groups.get(GENERAL)) : null;
    const summary = h("div", { class: "settings-summary", "aria-live": "assertive" });
    const form = h(
      "form",
      { class: "settings-form", "aria-label": "Node settings", novalidate: true, onSubmit: (event) => { event.preventDefault(); save(summary, saveButton); } },
      h("p", { class: "muted" }, "Saved to ", answer.path ? h("code", null, answer.path) : "this node's skulk.yaml", ". Inference changes apply to future launches; a setting marked so takes effect after a restart."),
      locked ? h("p", { id: reasonId, class: "notice" }, editing.trust_reason || "Trust settings are read-only from this browser.") : null,
      general,
      sections,
      summary,
    );
    const saveButton = h("button", { type: "submit", class: "primary" }, "Save");
    form.appendChild(h("div", { class: "form-actions" }, saveButton));
    replace(formHost, form);
  };

  const save = async (summary, button) => {
    const document = clone(loaded.config || {});
    for (const name of HIDDEN_SECTIONS) delete document[name];
    let invalid = false;
    for (const control of controls) {
      control.setError("");
      try {
        const value = control.read();
        if (control.secret) {
          if (value !== undefined) setAt(document, control.path, value);
        } else setAt(document, control.path, value);
      } catch (error) {
        control.setError(error.message);
        invalid = true;
      }
    }
    replace(summary);
    if (invalid) {
      replace(summary, h("p", { class: "error-box", role: "alert" }, "Some settings need fixing before they can be saved."));
      return;
    }
    const before = loaded.config || {};
    button.disabled = true;
    status.textContent = "Saving…";
    try {
      const answer = await api.put("/config", document, { signal });
      for (const control of controls) if (control.secret) control.clear();
      const restart = new Set(answer.editing?.restart_keys || []);
      const changed = controls.filter((c) => !c.secret && restart.has(c.dotted) && JSON.stringify(valueAt(before, c.path)) !== JSON.stringify(valueAt(answer.config, c.path)));
      render(answer, openapiDoc);
      formHost.querySelector('button[type="submit"]')?.focus({ preventScroll: true }); // keyboard users stay put
      const notice = changed.length
        ? `Saved. Restart the node for ${changed.map((c) => c.label).join(", ")} to take effect.`
        : "Saved.";
      status.textContent = notice;
    } catch (error) {
      if (error.name === "AbortError") return;
      status.textContent = "";
      button.disabled = false;
      const named = keysNamed(error.message || "");
      let placed = false;
      for (const key of named) {
        const control = controls.find((c) => c.dotted === key);
        if (control) {
          control.setError(error.message);
          control.input.focus();
          placed = true;
        }
      }
      const advice = error.status === 403 ? " Open the dashboard on the node itself (http://localhost) to change it." : "";
      replace(summary, h("div", { class: "error-box", role: "alert" }, h("p", null, `Not saved: ${error.message}.${advice}`), placed ? h("p", null, "See the highlighted setting.") : null));
    }
  };

  let openapiDoc = null;
  const load = async () => {
    replace(formHost, h("p", { class: "muted" }, "Loading settings…"));
    try {
      const [answer, openapi] = await Promise.all([
        api.get("/config", { signal }),
        api.get("/api/openapi.json", { signal }).catch((error) => {
          if (error.name === "AbortError") throw error;
          return null; // types fall back to the values
        }),
      ]);
      openapiDoc = openapi;
      render(answer, openapi);
    } catch (error) {
      if (error.name === "AbortError") return;
      replace(formHost, errorBox(`Settings could not be read: ${error.message}`, load));
    }
  };

  await load();
  const unmountPairing = mountPairing(pairingHost, ctx);
  return () => {
    unmountPairing();
  };
}

function valueAt(document, path) {
  let value = document;
  for (const name of path) value = value?.[name];
  return value ?? null;
}
