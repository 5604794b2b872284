// Settings → Devices & pairing: dashboard pairing invitations and paired devices
// (POST/GET/DELETE /v1/auth/pairing-invitations, GET/DELETE /v1/auth/devices, every
// call marked X-Skulk-Dashboard: pairing-v1).
//
// The pairing code is a bearer secret: it lives only in this module's memory while
// its QR is shown, never in the DOM as text, a URL, storage or a log, and is dropped
// after five minutes (the invitation itself lives as long as its lifetime says).
import { h, replace, formatAge } from "../dom.js";
import { qrcode } from "../vendor/qrcode-generator/qrcode.mjs";
import { grantControls, PLUGIN_GRANTS } from "./settings_grants.js";

const DASHBOARD = { headers: { "X-Skulk-Dashboard": "pairing-v1" } };
const INVITATIONS = "/v1/auth/pairing-invitations";
const DEVICES = "/v1/auth/devices";
export const QR_DISPLAY_MS = 5 * 60 * 1000;

const LIFETIMES = [
  ["1 hour", 3600],
  ["1 day", 86400],
  ["7 days", 7 * 86400],
  ["30 days", 30 * 86400],
  ["90 days", 90 * 86400],
];

/** What to do about a refusal: the API's own words, plus the next step when they do
 * not already name it. */
function guidance(error) {
  const message = (error.message || "The request failed").trim();
  const said = /[.!?]$/.test(message) ? message : `${message}.`;
  const next = {
    403: [/open the dashboard|localhost/i, "Invitations and devices are managed from a browser on the gateway itself (http://localhost:<port>/) or over Tailscale."],
    409: [/configure-relay/i, 'Pairing is set up on the gateway host from a terminal: run "uv run skulk operator configure-relay --provisioning-file …", restart Skulk, then come back here.'],
    421: [/open the dashboard|localhost/i, "Open the dashboard by this node's own name or http://localhost:<port>/."],
    422: [/^$/, "Choose a shorter lifetime or fewer devices."],
    503: [/^$/, "The gateway identity is briefly unavailable; try again in a moment."],
  }[error.status];
  return next && !next[0].test(message) ? `${said} ${next[1]}` : said;
}

function shortId(id) {
  return String(id).slice(0, 8);
}

function when(iso) {
  const t = Date.parse(iso);
  return Number.isFinite(t) ? new Date(t).toLocaleString() : "—";
}

/** The QR of `text` as SVG elements (no data URL, no innerHTML). */
function qrSvg(text) {
  const qr = qrcode(0, "L"); // L: the fewest modules for this long code, so phones scan it off a screen
  qr.addData(text);
  qr.make();
  const count = qr.getModuleCount();
  const margin = 4;
  const size = count + margin * 2;
  let d = "";
  for (let r = 0; r < count; r += 1) {
    for (let c = 0; c < count; c += 1) if (qr.isDark(r, c)) d += `M${c + margin} ${r + margin}h1v1h-1z`;
  }
  const svg = h(
    "svg",
    { viewBox: `0 0 ${size} ${size}`, role: "img", "aria-label": "Pairing QR code", class: "qr", "shape-rendering": "crispEdges" },
    h("rect", { width: size, height: size, fill: "#ffffff" }),
    h("path", { d, fill: "#111111" }),
  );
  return { svg, markup: () => new XMLSerializer().serializeToString(svg) };
}

export function mountPairing(host, { api, signal }) {
  const live = h("p", { class: "sr-only", "aria-live": "polite" });
  const alert = h("div", { class: "pairing-alert" });
  const qrHost = h("div", { class: "pairing-qr" });
  const invitationsHost = h("div", null, h("p", { class: "muted" }, "Loading invitations…"));
  const devicesHost = h("div", null, h("p", { class: "muted" }, "Loading devices…"));
  let shown = null; // {timer, invitationId}

  const lifetime = h("select", { id: "pairing-lifetime" }, LIFETIMES.map(([label, seconds]) => h("option", { value: String(seconds), selected: seconds === 86400 }, label)));
  const limit = h("input", { id: "pairing-limit", type: "number", min: "1", max: "20", step: "1", value: "10", required: true });
  const createButton = h("button", { type: "submit" }, "Create invitation");
  const form = h(
    "form",
    { class: "pairing-form", "aria-label": "New pairing invitation", onSubmit: (event) => { event.preventDefault(); create(); } },
    h("div", { class: "field" }, h("label", { for: "pairing-lifetime" }, "Lifetime"), lifetime),
    h("div", { class: "field" }, h("label", { for: "pairing-limit" }, "Device limit"), limit),
    createButton,
  );

  replace(
    host,
    h("h3", { id: "pairing-heading" }, "Devices & pairing"),
    h("p", { class: "muted" }, "Pair the Skulk app: create an invitation, then scan its QR code with the app. Treat the QR like a password."),
    form,
    alert,
    qrHost,
    h("h4", null, "Invitations"),
    invitationsHost,
    h("h4", null, "Paired devices"),
    devicesHost,
    live,
  );

  const fail = (error) => {
    if (error.name === "AbortError") return;
    replace(alert, h("div", { class: "error-box", role: "alert" }, h("p", null, guidance(error))));
  };

  const hideQr = (reason) => {
    if (shown) clearTimeout(shown.timer);
    shown = null; // the pairing code goes with the closure that held it
    replace(qrHost);
    if (reason) live.textContent = reason;
  };

  const showQr = (created) => {
    hideQr();
    let code = created.pairingCode;
    const { svg, markup } = qrSvg(code);
    code = null;
    const invitation = created.invitation;
    const download = () => {
      const blob = new Blob([markup()], { type: "image/svg+xml" });
      const url = URL.createObjectURL(blob);
      const link = h("a", { href: url, download: `skulk-pairing-${shortId(invitation.invitationId)}.svg` });
      document.body.appendChild(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 0);
    };
    replace(
      qrHost,
      h(
        "figure",
        { class: "qr-card", "aria-labelledby": "pairing-qr-caption" },
        svg,
        h(
          "figcaption",
          { id: "pairing-qr-caption" },
          `Invitation ${shortId(invitation.invitationId)}: up to ${invitation.maxPairings} device${invitation.maxPairings === 1 ? "" : "s"}, until ${when(invitation.expiresAt)}. `,
          "This code disappears from the page in 5 minutes; the invitation stays valid until it expires or is revoked.",
        ),
        h(
          "div",
          { class: "form-actions" },
          h("button", { type: "button", onClick: download }, "Download QR code"),
          h("button", { type: "button", onClick: () => revokeInvitation(invitation.invitationId) }, "Revoke this invitation"),
          h("button", { type: "button", onClick: () => hideQr("QR code hidden.") }, "Hide QR code"),
        ),
      ),
    );
    shown = { invitationId: invitation.invitationId, timer: setTimeout(() => hideQr("The QR code was cleared after 5 minutes."), QR_DISPLAY_MS) };
    live.textContent = "Invitation created; its QR code is shown.";
  };

  const create = async () => {
    const max = Number(limit.value);
    if (!Number.isInteger(max) || max < 1 || max > 20) {
      replace(alert, h("div", { class: "error-box", role: "alert" }, h("p", null, "Device limit must be a whole number from 1 to 20.")));
      limit.focus();
      return;
    }
    replace(alert);
    createButton.disabled = true;
    try {
      const created = await api.post(INVITATIONS, { validForSeconds: Number(lifetime.value), maxPairings: max }, { signal, ...DASHBOARD });
      showQr(created);
      await refresh();
    } catch (error) {
      fail(error);
    } finally {
      createButton.disabled = false;
    }
  };

  const revokeInvitation = async (id) => {
    try {
      await api.del(`${INVITATIONS}/${encodeURIComponent(id)}`, { signal, ...DASHBOARD });
      if (shown && shown.invitationId === id) hideQr();
      live.textContent = `Invitation ${shortId(id)} revoked.`;
      await refresh();
    } catch (error) {
      fail(error);
    }
  };

  const revokeDevice = async (device) => {
    try {
      await api.del(`${DEVICES}/${encodeURIComponent(device.deviceId)}`, { signal, ...DASHBOARD });
      live.textContent = `${device.deviceName} revoked.`;
      await refresh();
    } catch (error) {
      fail(error);
    }
  };

  const invitationTable = (rows) => {
    if (!rows.length) return h("p", { class: "muted" }, "No invitations yet.");
    return h(
      "table",
      { class: "data-table", "aria-label": "Pairing invitations" },
      h("thead", null, h("tr", null, ["Invitation", "State", "Devices paired", "Expires", ""].map((t) => h("th", { scope: "col" }, t)))),
      h(
        "tbody",
        null,
        rows.map((row) =>
          h(
            "tr",
            null,
            h("td", null, h("code", null, shortId(row.invitationId))),
            h("td", null, row.state),
            h("td", null, `${row.successfulPairings} of ${row.maxPairings}`, row.activeAttempts ? ` (${row.activeAttempts} pairing now)` : ""),
            h("td", null, when(row.expiresAt)),
            h("td", null, row.state === "active" ? h("button", { type: "button", onClick: () => revokeInvitation(row.invitationId) }, `Revoke invitation ${shortId(row.invitationId)}`) : null),
          ),
        ),
      ),
    );
  };

  const deviceTable = (rows, grants) => {
    if (!rows.length) return h("p", { class: "muted" }, "No devices paired yet.");
    return h(
      "table",
      { class: "data-table", "aria-label": "Paired devices" },
      h("thead", null, h("tr", null, ["Device", "Paired", "State", "Access"].map((t) => h("th", { scope: "col" }, t)))),
      h(
        "tbody",
        null,
        rows.map((row) =>
          h(
            "tr",
            null,
            h("td", null, row.deviceName, " ", h("code", null, shortId(row.deviceId))),
            h("td", null, formatAge(row.pairedAt)),
            h("td", null, row.active ? "active" : "revoked"),
            h(
              "td",
              null,
              row.active && grants.has(row.deviceId) ? grantControls(grants.get(row.deviceId), { api, signal, guidance }) : null,
              row.active ? h("button", { type: "button", onClick: () => revokeDevice(row) }, `Revoke device ${row.deviceName}`) : null,
            ),
          ),
        ),
      ),
    );
  };

  const refresh = async () => {
    const [invitations, devices, grants] = await Promise.allSettled([
      api.get(INVITATIONS, { signal, ...DASHBOARD }),
      api.get(DEVICES, { signal, ...DASHBOARD }),
      api.get(PLUGIN_GRANTS, { signal, ...DASHBOARD }),
    ]);
    // Without the grants (a refusal), devices are still listed and revocable.
    const grantRows = new Map(grants.status === "fulfilled" ? (grants.value.devices || []).map((g) => [g.deviceId, g]) : []);
    if (signal.aborted) return;
    if (invitations.status === "fulfilled") replace(invitationsHost, invitationTable(invitations.value.invitations || []));
    else replace(invitationsHost, h("div", { class: "notice", role: "alert" }, h("p", null, guidance(invitations.reason))));
    if (devices.status === "fulfilled") replace(devicesHost, deviceTable(devices.value.devices || [], grantRows));
    else if (invitations.status === "fulfilled" || devices.reason.status !== invitations.reason.status) {
      replace(devicesHost, h("div", { class: "notice", role: "alert" }, h("p", null, guidance(devices.reason))));
    } else replace(devicesHost, h("p", { class: "muted" }, "See above."));
    const refused = invitations.status === "rejected" && [403, 409, 421].includes(invitations.reason.status);
    for (const control of form.elements) control.disabled = refused;
  };

  refresh().catch(fail);
  return () => hideQr();
}
