// The Models page's two dialogs: Launch (placement previews -> POST /place_instance
// with the chosen one) and Delete (this node's bytes or a custom card, confirmed, the
// API's refusal shown with what to do). Each returns a <dialog> already open.
import { formatBytes, h, replace } from "../dom.js";
import { nodeNames, placedModels, placedStatus } from "./model_state.js";

let dialogCount = 0;

function openDialog(root, title, onClose) {
  const opener = document.activeElement;
  const id = `models-dialog-${++dialogCount}`;
  const body = h("div", { class: "dialog-body" });
  const close = h("button", { type: "button" }, "Close");
  const dialog = h(
    "dialog",
    { class: "models-dialog", "aria-labelledby": id },
    h("div", { class: "dialog-head" }, h("h2", { id }, title), close),
    body,
  );
  close.addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => {
    dialog.remove();
    if (onClose) onClose();
    // Keyboard users land back on the button that opened the dialog (when still drawn).
    if (opener && opener.isConnected && typeof opener.focus === "function") opener.focus();
  });
  root.appendChild(dialog);
  dialog.showModal();
  return { dialog, body };
}

function previewLabel(preview, names) {
  const nodes = (preview.node_ids || []).map((id) => names.get(id) || id.slice(0, 12));
  const shape = `${preview.sharding} · ${preview.instance_meta} · ${preview.node_count} node${preview.node_count === 1 ? "" : "s"}`;
  return `${shape}${nodes.length ? ` on ${nodes.join(", ")}` : ""}${preview.backend ? ` · ${preview.backend}` : ""}`;
}

function memoryList(preview, names) {
  const entries = Object.entries(preview.memory_delta_by_node || {});
  if (!entries.length) return null;
  return h(
    "ul",
    { class: "preview-memory", "aria-label": "Memory per node" },
    entries.map(([id, bytes]) => h("li", null, `${names.get(id) || id.slice(0, 12)}: ${formatBytes(bytes)}`)),
  );
}

/** Opens "Launch {model_id}": the previews, valid ones to choose, invalid ones with why. */
export function openLaunch(root, ctx, model, { onPlaced } = {}) {
  const controller = new AbortController();
  let unsubscribe = null;
  const { body } = openDialog(root, `Launch ${model.id}`, () => {
    controller.abort();
    if (unsubscribe) unsubscribe();
  });
  const status = h("div", { class: "launch-status", role: "status", "aria-live": "polite" });
  replace(body, h("p", { class: "muted" }, "Reading placement previews…"), status);

  const load = async () => {
    let previews;
    try {
      const answer = await ctx.api.get(`/instance/previews?model_id=${encodeURIComponent(model.id)}`, { signal: controller.signal });
      previews = answer.previews || [];
    } catch (error) {
      if (error.name === "AbortError") return;
      replace(body, h("div", { class: "error-box", role: "alert" }, h("p", null, `Previews failed: ${error.message}`), h("button", { type: "button", onClick: load }, "Retry")));
      return;
    }
    const names = nodeNames(ctx.live.state);
    const valid = previews.filter((p) => !p.error && p.instance);
    const invalid = previews.filter((p) => p.error || !p.instance);
    const groupName = `preview-${dialogCount}`;
    const choices = valid.map((preview, index) => {
      const id = `${groupName}-${index}`;
      const input = h("input", { type: "radio", name: groupName, id, value: String(index), checked: index === 0 });
      return h(
        "li",
        { class: "preview" },
        input,
        h("label", { for: id }, previewLabel(preview, names), preview.alternative ? " (alternative host)" : ""),
        h(
          "p",
          { class: "muted preview-facts" },
          preview.max_context_tokens ? `context up to ${preview.max_context_tokens.toLocaleString()} tokens (default ${Number(preview.default_context_tokens || 0).toLocaleString()})` : "",
        ),
        memoryList(preview, names),
      );
    });
    const place = h("button", { type: "button", class: "primary", disabled: valid.length === 0 }, `Place ${model.id}`);
    place.addEventListener("click", async () => {
      const checked = body.querySelector(`input[name="${groupName}"]:checked`);
      const preview = checked ? valid[Number(checked.value)] : null;
      if (!preview) return;
      place.disabled = true;
      replace(status, `Placing ${model.id}…`);
      const members = [...names.keys()];
      const chosen = new Set(preview.node_ids || []);
      try {
        const accepted = await ctx.api.post(
          "/place_instance",
          {
            model_id: model.id,
            sharding: preview.sharding,
            instance_meta: preview.instance_meta,
            min_nodes: preview.node_count,
            excluded_nodes: chosen.size ? members.filter((id) => !chosen.has(id)) : [],
          },
          { signal: controller.signal },
        );
        ctx.live.refresh();
        if (onPlaced) onPlaced(accepted);
        watch(accepted.instance_id);
      } catch (error) {
        if (error.name === "AbortError") return;
        place.disabled = false;
        replace(status, h("div", { class: "error-box", role: "alert" }, h("p", null, `Placement refused: ${error.message}`)));
      }
    });
    const watch = (instanceId) => {
      unsubscribe = ctx.live.subscribe((state) => {
        const instances = (placedModels(state).get(model.id) || []).filter((i) => i.instanceId === instanceId);
        const runnerStatus = instances.length ? placedStatus(instances) : "placing";
        const failed = instances.flatMap((i) => i.runners).find((r) => r.error);
        replace(
          status,
          h("p", null, `Placed ${model.id} as instance `, h("code", null, instanceId), `: ${runnerStatus}`),
          failed ? h("p", { class: "download-error", role: "alert" }, failed.error) : null,
          runnerStatus === "ready"
            ? h("button", { type: "button", onClick: () => ctx.navigate(`/chat?model=${encodeURIComponent(model.id)}`) }, `Chat with ${model.id}`)
            : null,
        );
      });
    };
    replace(
      body,
      valid.length
        ? h("fieldset", { class: "previews" }, h("legend", null, "Choose a placement"), h("ul", { class: "preview-list" }, choices))
        : h("p", { role: "alert" }, "No placement fits this cluster now; the reasons are below."),
      invalid.length
        ? h(
            "details",
            { open: valid.length === 0 },
            h("summary", null, `${invalid.length} placement${invalid.length === 1 ? "" : "s"} that cannot run`),
            h(
              "ul",
              { class: "preview-invalid", "aria-label": "Placements that cannot run" },
              invalid.map((p) => h("li", null, h("strong", null, previewLabel(p, names)), ": ", p.error || "no instance", p.error_code ? h("span", { class: "muted" }, ` (${p.error_code})`) : null)),
            ),
          )
        : null,
      h("div", { class: "dialog-actions" }, place),
      status,
    );
    const first = body.querySelector("input[type=radio]");
    if (first) first.focus();
  };
  load();
}

/** What a refusal means for the person: the API's words plus the next step. */
function refusalHelp(error) {
  if (error.code === "model_in_use" || /in use by instance/.test(error.message)) {
    return "Stop the instance first (Cluster page, or DELETE /instance/{id}), then delete again.";
  }
  if (error.status === 404) return "Nothing to delete there: this node holds no downloaded or imported copy.";
  if (error.status === 403) return "Deleting needs a browser on this node or a trusted LAN/Tailscale address.";
  return null;
}

/** Opens "Delete {model_id}?": bytes on one node, or the custom card, each confirmed. */
export function openDelete(root, ctx, model, { nodeId, onDeleted } = {}) {
  const controller = new AbortController();
  const { dialog, body } = openDialog(root, `Delete ${model.id}?`, () => controller.abort());
  const names = nodeNames(ctx.live.state);
  if (!names.size && nodeId) names.set(nodeId, "this node");
  const selectId = `delete-node-${dialogCount}`;
  const select = h(
    "select",
    { id: selectId },
    [...names.entries()].map(([id, name]) => h("option", { value: id, selected: id === nodeId }, id === nodeId ? `${name} (this node)` : name)),
  );
  const outcome = h("div", { class: "delete-outcome", "aria-live": "polite" });
  const fail = (error) => {
    const help = refusalHelp(error);
    replace(outcome, h("div", { class: "error-box", role: "alert" }, h("p", null, `Refused: ${error.message}`), help ? h("p", null, help) : null));
  };
  const files = h("button", { type: "button", class: "danger" }, "Delete files");
  files.addEventListener("click", async () => {
    files.disabled = true;
    try {
      await ctx.api.del(`/download/${encodeURIComponent(select.value)}/${model.id.split("/").map(encodeURIComponent).join("/")}`, { signal: controller.signal });
      ctx.live.refresh();
      if (onDeleted) onDeleted("files");
      dialog.close();
    } catch (error) {
      if (error.name !== "AbortError") fail(error);
    } finally {
      files.disabled = false;
    }
  });
  const card =
    model.catalog_source === "custom"
      ? h("button", { type: "button", class: "danger" }, "Remove card")
      : null;
  if (card) {
    card.addEventListener("click", async () => {
      card.disabled = true;
      try {
        await ctx.api.del(`/models/custom/${model.id.split("/").map(encodeURIComponent).join("/")}`, { signal: controller.signal });
        if (onDeleted) onDeleted("card");
        dialog.close();
      } catch (error) {
        if (error.name !== "AbortError") fail(error);
      } finally {
        card.disabled = false;
      }
    });
  }
  const cancel = h("button", { type: "button" }, "Cancel");
  cancel.addEventListener("click", () => dialog.close());
  replace(
    body,
    h("p", null, "Delete files removes the model's downloaded bytes from the chosen node. ", card ? "Remove card takes the added model out of the cluster's catalog. " : "", "Neither can be undone; a later download fetches the bytes again."),
    h("p", null, h("label", { for: selectId }, "Node "), select),
    h("div", { class: "dialog-actions" }, files, card, cancel),
    outcome,
  );
  cancel.focus();
}
