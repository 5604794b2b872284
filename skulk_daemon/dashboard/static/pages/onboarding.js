// First-run onboarding: when GET /onboarding says this node has not completed it, a
// short welcome dialog over the landing page (the cluster), whose steps include "Help
// make Skulk better?". Field telemetry stays off unless the person chooses it ("Not
// now" leaves it off; nothing is sent in this build either way). Finishing calls
// POST /onboarding, so the welcome does not come back on this node.
//
// Started once by the shell (static/app.js); not a routed page.
import { h, replace } from "../dom.js";

/** The paths a first visit lands on (`uv run skulk`, then http://localhost:52415/). */
const LANDING = new Set(["/", "/cluster"]);

export async function offer({ api }) {
  if (!LANDING.has(window.location.pathname.replace(/\/+$/, "") || "/")) return;
  let status;
  try {
    status = await api.get("/onboarding");
  } catch {
    return; // the welcome is a courtesy; the page itself shows an unreachable node
  }
  if (!status || status.completed) return;
  show(api);
}

function show(api) {
  const title = h("h2", { id: "onboarding-title" }, "Welcome to Skulk");
  const body = h("div", { class: "onboarding-body" });
  const live = h("p", { class: "onboarding-live", "aria-live": "polite" });
  const dialog = h("dialog", { class: "onboarding", "aria-labelledby": "onboarding-title" }, title, body, live);
  document.body.appendChild(dialog);
  dialog.addEventListener("close", () => dialog.remove());

  const finish = async ({ telemetry }) => {
    for (const button of body.querySelectorAll("button")) button.disabled = true;
    live.textContent = "Saving…";
    try {
      if (telemetry) {
        // Opting in is a setting like any other: the whole config, telemetry on.
        const current = await api.get("/config");
        const document = { ...current.config, telemetry: { ...(current.config.telemetry || {}), enabled: true } };
        delete document.model_trust;
        delete document.experiments;
        await api.put("/config", document);
      }
      await api.post("/onboarding");
      dialog.close();
    } catch (error) {
      live.textContent = "";
      for (const button of body.querySelectorAll("button")) button.disabled = false;
      replace(live, h("span", { role: "alert" }, `Could not finish: ${error.message}`));
    }
  };

  const welcome = () => {
    title.textContent = "Welcome to Skulk";
    replace(
      body,
      h("p", null, "Skulk joins the machines on your network into one cluster that serves AI models through OpenAI-, Ollama- and Anthropic-compatible APIs."),
      h(
        "ol",
        { class: "onboarding-steps" },
        h("li", null, "Cluster shows every node that joined and what runs where."),
        h("li", null, "Models finds, downloads and launches models; Chat talks to them."),
        h("li", null, "Settings (top right) holds this node's configuration and pairs the Skulk app."),
      ),
      h("div", { class: "form-actions" }, h("button", { type: "button", class: "primary", onClick: telemetryStep }, "Next")),
    );
    body.querySelector("button").focus();
  };

  const telemetryStep = () => {
    title.textContent = "Help make Skulk better?";
    replace(
      body,
      h("p", null, "Skulk can share content-free field telemetry: model ids, hardware class, timings, token counts and failure kinds. Never prompts, replies or files."),
      h("p", null, "It stays off unless you turn it on, and you can change it any time under Settings → Telemetry. This build sends nothing either way."),
      h(
        "div",
        { class: "form-actions" },
        h("button", { type: "button", onClick: () => finish({ telemetry: false }) }, "Not now"),
        h("button", { type: "button", class: "primary", onClick: () => finish({ telemetry: true }) }, "Share telemetry"),
      ),
    );
    body.querySelector("button").focus();
  };

  welcome();
  dialog.showModal();
}
