// Whether this browser can open a capability node's surface (extensions.txt, "A
// loopback surface URL"): a loopback URL (127.0.0.1, localhost, ::1) reaches only a
// browser running on the host itself, that is a page opened over loopback from the node
// that hosts the surface. Every other dashboard shows the entry as unreachable with a
// hint. The URL is never rewritten onto another address (a loopback-bound service would
// refuse it).

/** Whether `hostname` (as URL.hostname gives it) names this machine's loopback. */
export function isLoopback(hostname) {
  const host = String(hostname || "").toLowerCase();
  return host === "localhost" || host.endsWith(".localhost") || /^127\.\d+\.\d+\.\d+$/.test(host) || host === "[::1]" || host === "::1";
}

/**
 * {url} when this browser can open `url` (an http(s) address), else {url: null, hint}.
 * `hostNodeId` runs the surface, `servingNodeId` answers this page (null until known),
 * `hostName` is how people know the host.
 */
export function surfaceReach(url, { hostNodeId, servingNodeId, hostName, pageHost = window.location.hostname }) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return { url: null, hint: "Its address is not a web address." };
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return { url: null, hint: "Its address is not a web address." };
  if (!isLoopback(parsed.hostname)) return { url: parsed.href };
  if (isLoopback(pageHost) && servingNodeId !== null && hostNodeId === servingNodeId) return { url: parsed.href };
  return {
    url: null,
    hint:
      `Unreachable from this browser: it listens only on ${hostName}'s loopback (${parsed.host}). ` +
      `Open it from a browser on ${hostName}, or have its plugin listen on a routable address and publish that.`,
  };
}
