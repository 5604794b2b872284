// The Settings form's fields: one control per configuration key, typed from the
// API's OpenAPI schema for SkulkConfig (enums, nullable numbers) and, where the
// schema says nothing, from the value GET /config shows. Pure DOM building, no I/O.
import { h } from "../dom.js";

/** People's names for keys whose snake_case reads badly. Labels are the accessible
 * names tests and other clients drive the form by. */
const LABELS = {
  hf_token: "Hugging Face token",
  api: "API access",
  keys: "API keys",
  cors_origins: "CORS origins",
  hostnames: "Host names",
  kv_cache_backend: "KV cache backend",
  model_store: "Model store",
  models_dir: "Models directory",
  browser_tools: "Browser tools",
  search_api_key: "Search API key",
  search_url: "Search URL",
  otlp_endpoint: "OTLP endpoint",
  url: "URL",
  mdns: "mDNS discovery",
  key: "Cluster key",
  memory_reserve_gb: "Memory reserve (GB)",
  memory_limit_gb: "Memory limit (GB)",
  staging_keep_recent_gb: "Staging keep recent (GB)",
  staging_budget_gb: "Staging budget (GB)",
  prompt_cache_mb: "Prompt cache (MB)",
  settle_idle_ms: "Settle idle (ms)",
  timeout_seconds: "Timeout (seconds)",
};

export function labelFor(key) {
  if (LABELS[key]) return LABELS[key];
  const words = key.replace(/_/g, " ");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/** Walks the OpenAPI document to the schema of `path` (["inference", "kv_cache_backend"])
 * under SkulkConfig; null when the document lacks it. */
export function schemaAt(openapi, path) {
  const components = openapi?.components?.schemas;
  if (!components) return null;
  const resolve = (schema) => {
    let current = schema;
    for (let i = 0; current && current.$ref && i < 8; i += 1) {
      current = components[current.$ref.split("/").pop()];
    }
    return current || null;
  };
  let schema = resolve(components.SkulkConfig ? { $ref: "#/components/schemas/SkulkConfig" } : null);
  for (const name of path) {
    const props = schema?.properties;
    if (!props || !props[name]) return null;
    schema = resolve(props[name]);
  }
  return schema;
}

/** The field kind and facts for one key: {kind, nullable, options, integer, min, max}. */
export function describe(schema, value) {
  let nullable = value === null;
  let base = schema;
  const alternatives = schema?.anyOf || schema?.oneOf;
  if (alternatives) {
    nullable = nullable || alternatives.some((s) => s.type === "null");
    base = alternatives.find((s) => s.type !== "null") || null;
  }
  if (Array.isArray(base?.type)) {
    nullable = nullable || base.type.includes("null");
    base = { ...base, type: base.type.find((t) => t !== "null") };
  }
  const facts = { nullable, options: null, integer: false, min: base?.minimum ?? base?.exclusiveMinimum, max: base?.maximum };
  if (base?.enum) return { ...facts, kind: "enum", options: base.enum.filter((v) => v !== null) };
  const type = base?.type || (Array.isArray(value) ? "array" : value === null ? "string" : typeof value);
  if (type === "boolean") return { ...facts, kind: "boolean" };
  if (type === "integer") return { ...facts, kind: "number", integer: true };
  if (type === "number") return { ...facts, kind: "number" };
  if (type === "array") return { ...facts, kind: "list" };
  return { ...facts, kind: "text" };
}

/** One labelled control. Returns {row, read(), input}; read() gives the value to send
 * or throws Error(message) for what the browser can already tell is wrong. */
export function field({ id, key, value, facts, disabled, describedBy, hint }) {
  const label = labelFor(key);
  const hintId = hint ? `${id}-hint` : null;
  const errorId = `${id}-error`;
  const described = [describedBy, hintId, errorId].filter(Boolean).join(" ");
  let input;
  if (facts.kind === "boolean") {
    input = h("input", { id, type: "checkbox", checked: Boolean(value), disabled, "aria-describedby": described });
  } else if (facts.kind === "enum") {
    const options = facts.nullable ? ["", ...facts.options] : facts.options;
    input = h(
      "select",
      { id, disabled, "aria-describedby": described },
      options.map((option) => h("option", { value: option, selected: option === (value ?? "") }, option === "" ? "(unset)" : option)),
    );
  } else if (facts.kind === "list") {
    input = h("textarea", { id, rows: 2, disabled, "aria-describedby": described, value: (value || []).join("\n") });
  } else {
    input = h("input", {
      id,
      type: facts.kind === "number" ? "number" : "text",
      step: facts.kind === "number" ? (facts.integer ? "1" : "any") : null,
      min: facts.min ?? null,
      max: facts.max ?? null,
      placeholder: facts.nullable ? "(unset)" : null,
      disabled,
      "aria-describedby": described,
      value: value === null || value === undefined ? "" : String(value),
    });
  }
  const error = h("p", { id: errorId, class: "field-error" });
  const row = h(
    "div",
    { class: ["field", facts.kind === "boolean" ? "field-check" : null] },
    h("label", { for: id }, label),
    input,
    hint ? h("p", { id: hintId, class: "field-hint" }, hint) : null,
    error,
  );
  const read = () => {
    if (facts.kind === "boolean") return input.checked;
    const raw = input.value.trim();
    if (facts.kind === "list") return raw.split(/\n+/).map((s) => s.trim()).filter(Boolean);
    if (raw === "") {
      if (facts.nullable) return null;
      if (facts.kind === "text" || facts.kind === "enum") return raw;
      throw new Error(`${label} needs a value.`);
    }
    if (facts.kind === "number") {
      const number = Number(raw);
      if (!Number.isFinite(number) || (facts.integer && !Number.isInteger(number))) {
        throw new Error(`${label} must be ${facts.integer ? "a whole number" : "a number"}.`);
      }
      return number;
    }
    return raw;
  };
  const setError = (message) => {
    error.textContent = message || "";
    if (message) input.setAttribute("aria-invalid", "true");
    else input.removeAttribute("aria-invalid");
  };
  return { row, read, input, setError, label };
}

/** A write-only secret: its set/unset state, and a password box whose blank means
 * "keep". Never shows a value (GET /config never returns one). */
export function secretField({ id, key, isSet, disabled, describedBy, list }) {
  const label = labelFor(key);
  const statusId = `${id}-status`;
  const errorId = `${id}-error`;
  const input = list
    ? h("textarea", { id, rows: 2, disabled, autocomplete: "off", spellcheck: "false", "aria-describedby": [statusId, describedBy, errorId].filter(Boolean).join(" ") })
    : h("input", { id, type: "password", disabled, autocomplete: "new-password", "aria-describedby": [statusId, describedBy, errorId].filter(Boolean).join(" ") });
  const error = h("p", { id: errorId, class: "field-error" });
  const row = h(
    "div",
    { class: "field field-secret" },
    h("label", { for: id }, label),
    input,
    h("p", { id: statusId, class: ["secret-state", isSet ? "is-set" : null] }, isSet ? "Set (hidden; type to replace)" : "Not set (write-only)"),
    error,
  );
  const read = () => {
    const raw = input.value.trim();
    if (!raw) return undefined; // keep what the node has
    return list ? raw.split(/\n+/).map((s) => s.trim()).filter(Boolean) : raw;
  };
  const setError = (message) => {
    error.textContent = message || "";
    if (message) input.setAttribute("aria-invalid", "true");
    else input.removeAttribute("aria-invalid");
  };
  const clear = () => {
    input.value = "";
  };
  return { row, read, input, setError, clear, label };
}
