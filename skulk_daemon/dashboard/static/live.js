// The cluster's /state, kept fresh for every page. The API has no state stream, so
// this polls: one request at a time, every POLL_MS while the node answers, backing off
// exponentially (to MAX_BACKOFF_MS) while it does not, and not at all while the tab is
// hidden. Pages subscribe(fn) and get the latest snapshot at once and on each change.

export const POLL_MS = 2000;
export const MAX_BACKOFF_MS = 30000;
export const UNREACHABLE_AFTER = 3;
/** Consecutive failures after which the node shows as unreachable (not reconnecting). */

export const Connection = Object.freeze({
  CONNECTING: "connecting",
  CONNECTED: "connected",
  RECONNECTING: "reconnecting",
  UNREACHABLE: "unreachable",
});

export function createLive({ path = "/state", fetchJson, pollMs = POLL_MS, maxBackoffMs = MAX_BACKOFF_MS } = {}) {
  const subscribers = new Set();
  const statusSubscribers = new Set();
  let state = null;
  let status = Connection.CONNECTING;
  let failures = 0;
  let timer = null;
  let inFlight = null;
  let lastError = null;
  let stopped = false;

  const setStatus = (next) => {
    if (next === status) return;
    status = next;
    for (const fn of statusSubscribers) fn(status, lastError);
  };

  const schedule = (ms) => {
    clearTimeout(timer);
    timer = null;
    if (stopped || document.hidden) return;
    timer = setTimeout(poll, ms);
  };

  async function poll() {
    if (inFlight || stopped) return;
    const controller = new AbortController();
    inFlight = controller;
    const deadline = setTimeout(() => controller.abort(), 10000);
    try {
      const next = await fetchJson(path, { signal: controller.signal });
      failures = 0;
      lastError = null;
      state = next;
      setStatus(Connection.CONNECTED);
      for (const fn of subscribers) fn(state);
      schedule(pollMs);
    } catch (error) {
      failures += 1;
      lastError = error;
      setStatus(failures >= UNREACHABLE_AFTER ? Connection.UNREACHABLE : Connection.RECONNECTING);
      schedule(Math.min(maxBackoffMs, pollMs * 2 ** failures));
    } finally {
      clearTimeout(deadline);
      inFlight = null;
    }
  }

  const onVisibility = () => {
    if (document.hidden) {
      clearTimeout(timer);
      timer = null;
    } else {
      schedule(0);
    }
  };

  return {
    start() {
      document.addEventListener("visibilitychange", onVisibility);
      schedule(0);
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener("visibilitychange", onVisibility);
      if (inFlight) inFlight.abort();
    },
    /** Poll now (after a mutation a page wants to see at once). */
    refresh() {
      schedule(0);
    },
    /** fn(state) now (if known) and on every fresh snapshot; returns an unsubscribe. */
    subscribe(fn) {
      subscribers.add(fn);
      if (state) fn(state);
      return () => subscribers.delete(fn);
    },
    /** fn(status, error) on every connection change; returns an unsubscribe. */
    onStatus(fn) {
      statusSubscribers.add(fn);
      fn(status, lastError);
      return () => statusSubscribers.delete(fn);
    },
    get state() {
      return state;
    },
    get status() {
      return status;
    },
  };
}
