// Plugins → Configure: one installed node's ordinary settings
// (GET/POST /v1/plugins/{plugin}/nodes/{node}/configuration), rendered from the
// provider's schema. Validate and Save are separate steps; both carry the revision and
// schema fences the read returned, so a stale draft is refused (409) and reloaded.
// Credentials are never here (a separate write-only facet).
import { h, replace } from "../dom.js";

export async function configureForm(panel, { api, signal, owner, pluginId, nodeId, guidance, announce }) {
  const url = `/v1/plugins/${encodeURIComponent(pluginId)}/nodes/${encodeURIComponent(nodeId)}/configuration`;
  replace(panel, h("p", null, "Reading settings…"));
  let current;
  try {
    current = await api.get(url, { signal, ...owner });
  } catch (error) {
    if (error.name !== "AbortError") replace(panel, h("div", { class: "error-box", role: "alert" }, h("p", null, guidance(error))));
    return;
  }
  const schema = current.configurationSchema || {};
  const props = schema.properties || {};
  const inputs = [];
  const rows = Object.entries(props).map(([key, prop]) => {
    const id = `plugin-${pluginId}-${key}`.replace(/[^A-Za-z0-9_-]/g, "-");
    const value = current.values?.[key];
    const label = prop.title || key;
    let input;
    if (prop.type === "boolean") input = h("input", { id, type: "checkbox", checked: Boolean(value) });
    else if (Array.isArray(prop.enum)) input = h("select", { id }, prop.enum.map((o) => h("option", { value: String(o), selected: o === value }, String(o))));
    else input = h("input", { id, type: prop.type === "integer" || prop.type === "number" ? "number" : "text", value: value ?? "" });
    inputs.push({ key, prop, input });
    return h("div", { class: "field" }, h("label", { for: id }, label), input, prop.description ? h("p", { class: "field-hint" }, prop.description) : null);
  });
  const result = h("div", { "aria-live": "polite" });
  const values = () => {
    const out = {};
    for (const { key, prop, input } of inputs) {
      if (prop.type === "boolean") out[key] = input.checked;
      else if (prop.type === "integer" || prop.type === "number") out[key] = input.value === "" ? null : Number(input.value);
      else out[key] = input.value;
    }
    return out;
  };
  const send = async (operation) => {
    const body = { operation, expectedRevision: current.revision, expectedSchemaDigest: current.schemaDigest };
    if (operation === "validate" || operation === "edit") body.values = values();
    try {
      const answer = await api.post(url, body, { signal, ...owner });
      if (answer.configuration) current = answer.configuration;
      replace(result, h("p", null, operation === "validate" ? "These settings are valid." : "Saved."));
      announce(`${pluginId}: ${operation} done`);
    } catch (error) {
      if (error.name !== "AbortError") replace(result, h("div", { class: "error-box", role: "alert" }, h("p", null, guidance(error))));
    }
  };
  replace(
    panel,
    h(
      "form",
      { "aria-label": `Configure ${pluginId}`, onSubmit: (event) => { event.preventDefault(); send("edit"); } },
      rows.length ? rows : h("p", { class: "muted" }, "This plugin declares no ordinary settings."),
      h(
        "div",
        { class: "form-actions" },
        h("button", { type: "button", onClick: () => send("validate") }, "Validate"),
        h("button", { type: "submit", class: "primary" }, "Save configuration"),
        current.enabled ? h("button", { type: "button", onClick: () => send("disable") }, `Disable ${pluginId} node`) : h("button", { type: "button", onClick: () => send("enable") }, `Enable ${pluginId} node`),
      ),
      result,
    ),
  );
}
