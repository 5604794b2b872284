// The Chat page's web tools: a client-executed tool loop over the node's browser-tool
// endpoints (POST /v1/tools/web_search, /v1/tools/open_url, /v1/tools/extract_page).
// When "Web tools" is on for a model that calls tools (GPT-OSS's own browser, or any
// card declaring tools), the request offers these three functions; a reply that ends
// with finish_reason "tool_calls" is answered by running each call here, through the
// same public API and authority as any client, and sending its JSON back as a tool
// message. Only the offered tools are run; a bounded number of rounds per reply.

export const MAX_TOOL_ROUNDS = 4;

const string = (description) => ({ type: "string", description });
const fn = (name, description, properties, required) => ({
  type: "function",
  function: { name, description, parameters: { type: "object", properties, required, additionalProperties: false } },
});

/** The tool definitions the request offers (OpenAI function tools). */
export const WEB_TOOLS = [
  fn("web_search", "Search the web. Returns titles, URLs and snippets.", { query: string("What to search for."), top_k: { type: "integer", minimum: 1, maximum: 10, description: "How many results (default 5)." } }, ["query"]),
  fn("open_url", "Fetch one http(s) URL, following redirects; returns its final URL, status, title and content type.", { url: string("An absolute http:// or https:// URL.") }, ["url"]),
  fn("extract_page", "Fetch one http(s) URL and return its readable text.", { url: string("An absolute http:// or https:// URL."), max_chars: { type: "integer", minimum: 500, maximum: 50000, description: "Most characters of text (default 12000)." } }, ["url"]),
];

/** Each tool's request fields: nothing else the model sends reaches the node. */
const FIELDS = { web_search: ["query", "top_k"], open_url: ["url"], extract_page: ["url", "max_chars"] };

/** Whether "Web tools" starts on for `model` (GPT-OSS has a browser of its own). */
export const webToolsByDefault = (model) => /gpt-oss/i.test(model?.id || "");

/** Merges one frame's delta.tool_calls into `calls` (by index; a frame may carry the
 * whole call so far or a fragment of its arguments). */
export function mergeToolCalls(calls, deltas) {
  for (const delta of deltas || []) {
    const index = Number.isInteger(delta.index) ? delta.index : calls.length;
    const call = (calls[index] ||= { id: "", name: "", arguments: "" });
    if (delta.id) call.id = delta.id;
    if (delta.function?.name) call.name = delta.function.name;
    const args = delta.function?.arguments;
    if (typeof args === "string") call.arguments = args.startsWith(call.arguments) ? args : call.arguments + args;
  }
  return calls;
}

function summary(name, args, answer) {
  if (name === "web_search") {
    const n = (answer.results || []).length;
    return `Searched the web for “${args.query}”: ${n} result${n === 1 ? "" : "s"}.`;
  }
  if (name === "open_url") return `Opened ${answer.final_url || args.url} (${answer.status_code ?? "?"}${answer.title ? `, “${answer.title}”` : ""}).`;
  return `Read ${answer.final_url || args.url}${answer.title ? ` (“${answer.title}”)` : ""}${answer.truncated ? ", clipped" : ""}.`;
}

/** Runs one call; resolves {content (the JSON the model gets), summary (for people)}.
 * A refusal or a bad call becomes an {"error": …} result the model can read. */
export async function runToolCall(api, call, { signal }) {
  const fields = FIELDS[call.name];
  if (!fields) return failed(call.name, `${call.name || "(unnamed)"} is not a tool this chat offers`);
  let parsed;
  try {
    parsed = call.arguments ? JSON.parse(call.arguments) : {};
  } catch {
    return failed(call.name, "its arguments are not JSON");
  }
  const args = Object.fromEntries(fields.filter((k) => parsed?.[k] !== undefined).map((k) => [k, parsed[k]]));
  try {
    const answer = await api.post(`/v1/tools/${call.name}`, args, { signal });
    return { content: JSON.stringify(answer), summary: summary(call.name, args, answer) };
  } catch (error) {
    if (error?.name === "AbortError") throw error;
    return failed(call.name, error.message);
  }
}

function failed(name, message) {
  return { content: JSON.stringify({ error: message }), summary: `${name || "A tool"} failed: ${message}`, failed: true };
}
