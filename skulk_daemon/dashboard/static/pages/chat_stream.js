// One streamed chat completion: POST /v1/chat/completions with stream: true, read as
// SSE. Unlike api.stream it hands over the command id as soon as the answer starts
// (the X-Skulk-Command-Id header), so Stop can cancel before the first token.

import { ApiError } from "../api.js";
import { mergeToolCalls } from "./chat_tools.js";

function errorOf(body, status) {
  const err = body && typeof body === "object" ? body.error : null;
  if (err && typeof err === "object" && typeof err.message === "string") return new ApiError(status, err.message, { code: err.code ?? err.type ?? null, body });
  if (typeof err === "string") return new ApiError(status, err, { body });
  if (typeof body === "string" && body.trim()) return new ApiError(status, body.trim().slice(0, 500), { body });
  return new ApiError(status, `The chat request failed with ${status}.`, { body });
}

/** Streams one completion. onStart(commandId) once the node accepted it; onDelta({content,
 * reasoning}) per chunk. Resolves {finishReason, usage, toolCalls}; rejects with ApiError (a refusal
 * or an error envelope mid-stream) or AbortError (signal). */
export async function streamChat(body, { signal, onStart, onDelta }) {
  let response;
  try {
    response = await fetch("/v1/chat/completions", {
      method: "POST",
      signal,
      credentials: "same-origin",
      headers: { Accept: "text/event-stream", "Content-Type": "application/json" },
      body: JSON.stringify({ ...body, stream: true }),
    });
  } catch (error) {
    if (error?.name === "AbortError") throw error;
    throw new ApiError(0, "The node could not be reached.");
  }
  if (!response.ok) {
    const text = await response.text();
    let parsed = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* plain text */
    }
    throw errorOf(parsed, response.status);
  }
  let commandId = response.headers.get("X-Skulk-Command-Id");
  if (commandId) onStart(commandId);
  const result = { finishReason: null, usage: null, toolCalls: [] };
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data = [];
  const dispatch = () => {
    if (data.length === 0) return false;
    const raw = data.join("\n");
    data = [];
    if (raw === "[DONE]") return true;
    let chunk;
    try {
      chunk = JSON.parse(raw);
    } catch {
      return false;
    }
    if (chunk.error) throw errorOf(chunk, 500);
    if (!commandId && chunk.id) {
      commandId = chunk.id;
      onStart(commandId);
    }
    for (const choice of chunk.choices || []) {
      const delta = choice.delta || {};
      if (delta.content || delta.reasoning_content) onDelta({ content: delta.content || "", reasoning: delta.reasoning_content || "" });
      if (delta.tool_calls) mergeToolCalls(result.toolCalls, delta.tool_calls);
      if (choice.finish_reason) result.finishReason = choice.finish_reason;
    }
    if (chunk.usage) result.usage = chunk.usage;
    return false;
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.search(/\r?\n/)) >= 0) {
      const line = buffer.slice(0, cut);
      buffer = buffer.slice(cut + (buffer[cut] === "\r" ? 2 : 1));
      if (line === "") {
        if (dispatch()) return result;
      } else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
  }
  dispatch();
  return result;
}
