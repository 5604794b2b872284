// Pure reading of /v1/models and /state into what the Chat page offers: the placed,
// ready models it can chat with, speak with and transcribe with. No DOM here.

import { untag } from "./cluster_model.js";

const READY = new Set(["RunnerReady", "RunnerRunning"]);

/** Model ids with at least one placed instance whose every runner is ready. */
export function readyModelIds(state) {
  const ready = new Set();
  for (const tagged of Object.values(state?.instances || {})) {
    const [, body] = untag(tagged);
    const assignments = body?.shardAssignments;
    if (!assignments?.modelId) continue;
    const runnerIds = Object.values(assignments.nodeToRunner || {});
    if (runnerIds.length === 0) continue;
    const allReady = runnerIds.every((id) => READY.has(untag((state.runners || {})[id])[0]));
    if (allReady) ready.add(assignments.modelId);
  }
  return ready;
}

/** Model ids placed at all (ready or not), so the page can say "loading" honestly. */
export function placedModelIds(state) {
  const placed = new Set();
  for (const tagged of Object.values(state?.instances || {})) {
    const [, body] = untag(tagged);
    if (body?.shardAssignments?.modelId) placed.add(body.shardAssignments.modelId);
  }
  return placed;
}

const caps = (item) => item.resolved_capabilities || {};

/** What a catalog item is good for on this page. */
export function describe(item) {
  const capabilities = item.capabilities || [];
  return {
    id: item.id,
    name: item.name || item.id,
    chat: capabilities.includes("text"),
    vision: Boolean(caps(item).supports_vision),
    tools: Boolean(caps(item).supports_tools),
    thinking: Boolean(caps(item).supports_thinking),
    tts: Boolean(caps(item).supports_speech_synthesis),
    stt: Boolean(caps(item).supports_transcription),
    realtime: Boolean(caps(item).supports_realtime_audio),
    voices: item.audio?.voices || [],
    defaultVoice: item.audio?.default_voice || null,
    formats: caps(item).audio_response_formats || [],
  };
}

/** {chat, tts, stt, waiting}: ready models by use (sorted by id), and the placed ones
 * still loading (ids), from the catalog items and the live state. */
export function chatModels(items, state) {
  const ready = readyModelIds(state);
  const placed = placedModelIds(state);
  const known = (items || []).map(describe);
  const pick = (use) => known.filter((m) => m[use] && ready.has(m.id)).sort((a, b) => a.id.localeCompare(b.id));
  const waiting = [...placed].filter((id) => !ready.has(id)).sort();
  return { chat: pick("chat"), tts: pick("tts"), stt: pick("stt"), waiting };
}

/** A format the browser plays, among those the speech model declares. */
export function playableFormat(model) {
  const formats = model?.formats || [];
  for (const preferred of ["mp3", "wav", "ogg", "opus", "flac"]) if (formats.includes(preferred)) return preferred;
  return null;
}
