// Speech for the Chat page: text to audio through POST /v1/audio/speech, and the
// microphone to text, either batch (MediaRecorder, then POST /v1/audio/transcriptions)
// or realtime (an AudioWorklet feeding 24 kHz PCM16 to the /v1/realtime WebSocket,
// partial transcripts as they come). Same origin, public API only.

import { ApiError } from "../api.js";

export const REALTIME_CAPABILITY = "stt.realtime";
const REALTIME_RATE = 24_000;
const FRAME_SAMPLES = REALTIME_RATE / 10; // 100 ms transport frames

async function failure(response, what) {
  let message = `${what} failed with ${response.status}.`;
  try {
    const body = await response.json();
    if (typeof body?.error?.message === "string") message = body.error.message;
    else if (typeof body?.error === "string") message = body.error;
  } catch {
    /* not JSON */
  }
  return new ApiError(response.status, message);
}

/** The audio for `text` spoken by `model` (a Blob of an audio/* type). */
export async function synthesize({ model, voice, format, text, signal }) {
  const body = { model, input: text };
  if (voice) body.voice = voice;
  if (format) body.response_format = format;
  let response;
  try {
    response = await fetch("/v1/audio/speech", {
      method: "POST",
      signal,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "audio/*" },
      body: JSON.stringify(body),
    });
  } catch (error) {
    if (error?.name === "AbortError") throw error;
    throw new ApiError(0, "The node could not be reached.");
  }
  if (!response.ok) throw await failure(response, "Speech");
  const blob = await response.blob();
  if (!blob.type.startsWith("audio/")) throw new ApiError(500, `Speech answered ${blob.type || "no type"}, not audio.`);
  return blob;
}

/** Whether this node advertises the realtime transcription provider. */
export async function realtimeAdvertised(api, signal) {
  try {
    const listing = await api.get("/v1/capabilities", { signal });
    return (listing?.capabilities || []).some((d) => d.id === REALTIME_CAPABILITY);
  } catch (error) {
    if (error?.name === "AbortError") throw error;
    return false;
  }
}

export function microphoneProblem() {
  if (!window.isSecureContext) return "Recording needs a secure page (HTTPS or localhost).";
  if (!navigator.mediaDevices?.getUserMedia) return "This browser offers no microphone.";
  return null;
}

function microphoneError(error) {
  if (error?.name === "NotAllowedError") return "The microphone was not allowed. Allow it in the browser's site settings.";
  if (error?.name === "NotFoundError") return "No microphone was found.";
  return `The microphone could not start: ${error?.message || error}`;
}

async function openMicrophone() {
  try {
    return await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true } });
  } catch (error) {
    throw new ApiError(0, microphoneError(error));
  }
}

/** Batch recording: start() captures, stop() uploads and resolves the transcript. */
export async function startBatchRecording({ model, signal }) {
  const stream = await openMicrophone();
  const type = ["audio/webm;codecs=opus", "audio/ogg;codecs=opus", "audio/webm"].find((t) => window.MediaRecorder?.isTypeSupported?.(t));
  const recorder = new MediaRecorder(stream, type ? { mimeType: type } : undefined);
  const parts = [];
  recorder.addEventListener("dataavailable", (event) => {
    if (event.data?.size) parts.push(event.data);
  });
  const stopped = new Promise((resolve) => recorder.addEventListener("stop", resolve, { once: true }));
  recorder.start(250);
  const release = () => stream.getTracks().forEach((t) => t.stop());
  signal?.addEventListener("abort", () => {
    if (recorder.state !== "inactive") recorder.stop();
    release();
  });
  return {
    async stop() {
      if (recorder.state !== "inactive") recorder.stop();
      await stopped;
      release();
      const mime = recorder.mimeType || type || "audio/webm";
      const audio = new Blob(parts, { type: mime });
      if (audio.size === 0) throw new ApiError(0, "Nothing was recorded.");
      const form = new FormData();
      form.append("file", audio, mime.includes("ogg") ? "speech.ogg" : "speech.webm");
      form.append("model", model);
      form.append("response_format", "json");
      let response;
      try {
        response = await fetch("/v1/audio/transcriptions", { method: "POST", body: form, signal, credentials: "same-origin" });
      } catch (error) {
        if (error?.name === "AbortError") throw error;
        throw new ApiError(0, "The node could not be reached.");
      }
      if (!response.ok) throw await failure(response, "Transcription");
      const body = await response.json();
      return String(body?.text ?? "").trim();
    },
    cancel() {
      if (recorder.state !== "inactive") recorder.stop();
      release();
    },
  };
}

/** Continuous linear resampling to 24 kHz across blocks (keeps phase between calls). */
export function createResampler(fromRate, toRate = REALTIME_RATE) {
  const step = fromRate / toRate;
  let position = 0; // in input samples, relative to the start of `carry`
  let carry = new Float32Array(0);
  return (block) => {
    const input = new Float32Array(carry.length + block.length);
    input.set(carry);
    input.set(block, carry.length);
    const out = [];
    while (position + 1 < input.length) {
      const i = Math.floor(position);
      const frac = position - i;
      out.push(input[i] + (input[i + 1] - input[i]) * frac);
      position += step;
    }
    const keep = Math.floor(position);
    carry = input.slice(keep);
    position -= keep;
    return Float32Array.from(out);
  };
}

function pcm16Base64(samples) {
  const bytes = new Uint8Array(samples.length * 2);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < samples.length; i += 1) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    view.setInt16(i * 2, s < 0 ? s * 0x8000 : s * 0x7fff, true);
  }
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

/** Realtime recording over WS /v1/realtime: onPartial(text) as deltas arrive; stop()
 * commits the utterance and resolves the final transcript. */
export async function startRealtimeRecording({ model, signal, onPartial }) {
  const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${window.location.host}/v1/realtime?model=${encodeURIComponent(model)}`);
  let partial = "";
  let settle = null;
  let closedEarly = null;
  const opened = new Promise((resolve, reject) => {
    socket.addEventListener("message", (event) => {
      let msg;
      try {
        msg = JSON.parse(event.data);
      } catch {
        return;
      }
      switch (msg.type) {
        case "session.created":
          resolve();
          break;
        case "conversation.item.input_audio_transcription.delta":
          partial += msg.delta || "";
          onPartial?.(partial);
          break;
        case "conversation.item.input_audio_transcription.completed":
          settle?.resolve(String(msg.transcript ?? partial).trim());
          break;
        case "conversation.item.input_audio_transcription.failed":
          settle?.reject(new ApiError(0, `Transcription failed: ${msg.error?.message || "the provider gave up"}`));
          break;
        case "error":
          if (settle) settle.reject(new ApiError(0, msg.error?.message || "The realtime session refused the audio."));
          else reject(new ApiError(0, msg.error?.message || "The realtime session refused to start."));
          break;
        default:
          break;
      }
    });
    socket.addEventListener("close", (event) => {
      closedEarly = new ApiError(0, `The realtime session closed (${event.code}${event.reason ? `: ${event.reason}` : ""}).`);
      reject(closedEarly);
      settle?.reject(closedEarly);
    });
    socket.addEventListener("error", () => reject(new ApiError(0, "The realtime session could not be opened.")));
  });
  await opened;

  let stream;
  try {
    stream = await openMicrophone();
  } catch (error) {
    socket.close();
    throw error;
  }
  const context = new AudioContext();
  await context.audioWorklet.addModule(new URL("./chat_pcm_worklet.js", import.meta.url));
  const source = context.createMediaStreamSource(stream);
  const node = new AudioWorkletNode(context, "skulk-pcm-capture");
  const resample = createResampler(context.sampleRate);
  let pending = new Float32Array(0);
  let sent = 0;
  const send = (samples) => {
    if (socket.readyState !== WebSocket.OPEN || samples.length === 0) return;
    socket.send(JSON.stringify({ type: "input_audio_buffer.append", audio: pcm16Base64(samples) }));
    sent += samples.length;
  };
  node.port.onmessage = (event) => {
    const next = resample(event.data);
    const joined = new Float32Array(pending.length + next.length);
    joined.set(pending);
    joined.set(next, pending.length);
    let offset = 0;
    while (joined.length - offset >= FRAME_SAMPLES) {
      send(joined.subarray(offset, offset + FRAME_SAMPLES));
      offset += FRAME_SAMPLES;
    }
    pending = joined.slice(offset);
  };
  source.connect(node);
  const release = () => {
    node.port.onmessage = null;
    source.disconnect();
    stream.getTracks().forEach((t) => t.stop());
    context.close().catch(() => {});
  };
  signal?.addEventListener("abort", () => {
    release();
    socket.close();
  });
  return {
    async stop() {
      release();
      send(pending);
      pending = new Float32Array(0);
      if (sent === 0) {
        socket.close();
        throw new ApiError(0, "Nothing was recorded.");
      }
      if (closedEarly) throw closedEarly;
      const done = new Promise((resolve, reject) => {
        settle = { resolve, reject };
      });
      socket.send(JSON.stringify({ type: "input_audio_buffer.commit" }));
      try {
        return await done;
      } finally {
        socket.close();
      }
    },
    cancel() {
      release();
      socket.close();
    },
  };
}
