// Settings → Devices & pairing → plugin access: the owner's explicit plugin grants
// for one paired device (GET /v1/auth/plugin-grants, PUT …/{device_id} with the
// row's revision as the fence). Pairing grants no plugin privileges by itself.
import { h, replace } from "../dom.js";

const DASHBOARD = { headers: { "X-Skulk-Dashboard": "pairing-v1" } };
export const PLUGIN_GRANTS = "/v1/auth/plugin-grants";
const SCOPES = [
  ["plugins:read", "Read plugins"],
  ["plugins:manage", "Manage plugins"],
  ["plugins:approve", "Approve plugin proposals"],
];

/** The plugin-access controls for `grant` (a GET /v1/auth/plugin-grants row). */
export function grantControls(grant, { api, signal, guidance }) {
  let revision = grant.revision; // the fence for the next save
  const result = h("p", { class: "field-hint", "aria-live": "polite" });
  const boxes = SCOPES.map(([scope, label]) => {
    const id = `grant-${grant.deviceId}-${scope.replace(":", "-")}`;
    const input = h("input", { id, type: "checkbox", checked: grant.scopes.includes(scope) });
    return { scope, input, row: h("div", { class: "field field-check" }, input, h("label", { for: id }, label)) };
  });
  const save = async () => {
    const scopes = boxes.filter((b) => b.input.checked).map((b) => b.scope);
    try {
      const saved = await api.put(`${PLUGIN_GRANTS}/${encodeURIComponent(grant.deviceId)}`, { expectedRevision: revision, scopes }, { signal, ...DASHBOARD });
      revision = saved.revision;
      for (const b of boxes) b.input.checked = saved.scopes.includes(b.scope);
      replace(result, "Plugin access saved.");
    } catch (error) {
      if (error.name === "AbortError") return;
      // A stale revision: someone changed this device's access since it was read.
      const text = error.status === 409 && error.code !== "not_gateway" ? `${error.message}. Close and reopen Settings to read the current access, then save again.` : guidance(error);
      replace(result, h("span", { role: "alert" }, text));
    }
  };
  return h(
    "fieldset",
    { class: "settings-group grant-group" },
    h("legend", null, `Plugin access for ${grant.deviceName}`),
    boxes.map((b) => b.row),
    h("button", { type: "button", onClick: save }, `Save plugin access for ${grant.deviceName}`),
    result,
  );
}

