// The dashboard's only way to the node: the public HTTP API, same origin, same
// authority policy as any client. Every call returns parsed JSON or throws ApiError.

/** A refusal or failure, with the HTTP status (0: the node was not reached) and the
 * server's own message (OpenAI, Anthropic and Ollama envelopes are all read). */
export class ApiError extends Error {
  constructor(status, message, { code = null, body = null } = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

function messageOf(body, fallback) {
  if (body && typeof body === "object") {
    const err = body.error;
    if (err && typeof err === "object" && typeof err.message === "string") return [err.message, err.code ?? err.type ?? null];
    if (typeof err === "string") return [err, null];
    if (typeof body.detail === "string") return [body.detail, null];
    if (typeof body.message === "string") return [body.message, null];
  }
  if (typeof body === "string" && body.trim()) return [body.trim().slice(0, 500), null];
  return [fallback, null];
}

async function readBody(response) {
  const type = response.headers.get("content-type") || "";
  if (response.status === 204) return null;
  const text = await response.text();
  if (!text) return null;
  if (type.includes("json")) {
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }
  return text;
}

// One request to the node: a JSON body when given, same-origin credentials; a
// network failure is an ApiError with status 0 (an abort stays an AbortError).
async function reach(method, path, accept, { body, signal, headers } = {}) {
  const init = { method, signal, headers: { Accept: accept, ...(headers || {}) }, credentials: "same-origin" };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  try {
    return await fetch(path, init);
  } catch (error) {
    if (error && error.name === "AbortError") throw error;
    throw new ApiError(0, "The node could not be reached.");
  }
}

async function send(method, path, options = {}) {
  const response = await reach(method, path, "application/json", options);
  const parsed = await readBody(response);
  if (!response.ok) {
    const [message, code] = messageOf(parsed, `${method} ${path} failed with ${response.status}`);
    throw new ApiError(response.status, message, { code, body: parsed });
  }
  return parsed;
}

export const get = (path, opts) => send("GET", path, opts);
export const post = (path, body, opts) => send("POST", path, { ...opts, body });
export const put = (path, body, opts) => send("PUT", path, { ...opts, body });
export const del = (path, opts) => send("DELETE", path, opts);

/** Parses a text/event-stream body, calling onEvent({event, data}) per event; `data`
 * is parsed JSON where it parses, else the raw string ("[DONE]" stays a string). */
async function pump(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "message";
  let data = [];
  const dispatch = () => {
    if (data.length === 0) return;
    const raw = data.join("\n");
    let parsed = raw;
    try {
      parsed = JSON.parse(raw);
    } catch {
      /* not JSON: hand it over as text */
    }
    onEvent({ event, data: parsed });
    event = "message";
    data = [];
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.search(/\r?\n/)) >= 0) {
      const line = buffer.slice(0, cut);
      buffer = buffer.slice(cut + (buffer[cut] === "\r" ? 2 : 1));
      if (line === "") dispatch();
      else if (line.startsWith(":")) continue;
      else {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") data.push(val);
        else if (field === "event") event = val;
      }
    }
  }
  dispatch();
}

async function openStream(method, path, body, { signal, onEvent, headers } = {}) {
  const response = await reach(method, path, "text/event-stream", { body, signal, headers });
  if (!response.ok) {
    const parsed = await readBody(response);
    const [message, code] = messageOf(parsed, `${method} ${path} failed with ${response.status}`);
    throw new ApiError(response.status, message, { code, body: parsed });
  }
  await pump(response, onEvent);
}

/** POST `body` to an SSE route (chat completions with stream: true, ...); resolves
 * when the stream ends, rejects with ApiError on a refusal, AbortError on `signal`. */
export const stream = (path, body, opts) => openStream("POST", path, body, opts);

/** GET an SSE route (progress streams); same contract as stream(). */
export const events = (path, opts) => openStream("GET", path, undefined, opts);

export const api = { get, post, put, del, stream, events, ApiError };
