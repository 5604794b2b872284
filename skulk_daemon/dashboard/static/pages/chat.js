// The Chat page: talk to a placed, ready text model through POST /v1/chat/completions
// (streamed), with conversations kept in this browser, Stop through POST
// /v1/cancel/{id}, images for vision models, and speech: a draft spoken through
// /v1/audio/speech, replies spoken on finish ("Auto"), and the microphone transcribed
// into the draft (/v1/realtime when the model and node offer it, else
// /v1/audio/transcriptions), and web tools for models that call tools (chat_tools.js).
// Follows the page contract at the top of static/app.js.

import { h, replace, errorBox } from "../dom.js";
import { chatModels, playableFormat } from "./chat_models.js";
import { load, save, newConversation, titleOf, toOpenAI } from "./chat_store.js";
import { streamChat } from "./chat_stream.js";
import { MAX_TOOL_ROUNDS, WEB_TOOLS, runToolCall, webToolsByDefault } from "./chat_tools.js";
import { messageView, conversationList, attachmentList } from "./chat_view.js";
import { synthesize, realtimeAdvertised, microphoneProblem, startBatchRecording, startRealtimeRecording } from "./chat_speech.js";

export const DEFAULT_MAX_TOKENS = 256;
const MAX_IMAGE_BYTES = 8 * 1024 * 1024;

export async function mount(root, ctx) {
  const { api, live, signal } = ctx;
  let store = load();
  let items = null; // /v1/models data
  let models = { chat: [], tts: [], stt: [], waiting: [] };
  let modelsKey = "";
  let pendingImages = []; // {name, url}
  let active = null; // {controller, commandId, stopped, conversationId}
  let recording = null; // {handle, base}
  let audioUrl = null;
  const wantedModel = ctx.query.get("model");

  const current = () => store.conversations.find((c) => c.id === store.currentId) || null;
  const persist = () => {
    if (!save(store)) showError("This browser's storage is full: the conversation is not saved.", null);
  };

  // -- the page's elements ------------------------------------------------------------
  const modelSelect = h("select", { id: "chat-model", "aria-label": "Select chat model", onChange: onModelChange });
  const maxTokens = h("input", { id: "chat-max-tokens", type: "number", min: "1", max: "32768", step: "1", value: String(DEFAULT_MAX_TOKENS), inputmode: "numeric" });
  const toolsBox = h("input", { type: "checkbox", id: "chat-web-tools" });
  const toolsLabel = h("label", { class: "chat-auto", hidden: true, title: "Let the model search the web and read pages, through this node's /v1/tools endpoints" }, toolsBox, " Web tools");
  let toolsFor = null; // the model whose default "Web tools" was last applied
  const modelStatus = h("p", { class: "chat-model-status muted", role: "status", "aria-live": "polite" });
  const list = h("div", { class: "chat-list" });
  const log = h("div", { class: "chat-log", role: "log", "aria-label": "Messages", "aria-live": "off", tabindex: "0" });
  const errorSlot = h("div", { class: "chat-error" });
  const progress = h("p", { class: "sr-only", role: "status", "aria-live": "polite" });
  const draft = h("textarea", { id: "chat-draft", rows: "3", "aria-label": "Chat message", placeholder: "Message", onKeydown: onDraftKey });
  const attachInput = h("input", { type: "file", accept: "image/*", multiple: true, class: "sr-only", "aria-label": "Image attachment file", tabindex: "-1", onChange: onAttach });
  const attachButton = h("button", { type: "button", onClick: () => attachInput.click() }, "Attach file");
  const attachBox = h("span", { class: "chat-attach", hidden: true }, attachButton, attachInput);
  const attachments = h("div");
  const sendButton = h("button", { type: "submit", class: "primary" }, "Send message");
  const newButton = h("button", { type: "button", onClick: startNew }, "+ New");
  const stopButton = h("button", { type: "button", hidden: true, onClick: stop }, "Stop");
  const form = h(
    "form",
    { class: "chat-composer", onSubmit: onSend },
    attachments,
    draft,
    h("div", { class: "chat-actions" }, attachBox, h("span", { class: "chat-spacer" }), stopButton, sendButton),
  );

  const ttsSelect = h("select", { "aria-label": "Select speech model", onChange: () => { speechPrefs.set("tts", ttsSelect.value); fillVoices(); } });
  const voiceSelect = h("select", { "aria-label": "Select voice" });
  const voiceLabel = h("label", { hidden: true }, "Voice ", voiceSelect);
  const sttSelect = h("select", { "aria-label": "Select transcription model", onChange: () => speechPrefs.set("stt", sttSelect.value) });
  const speakButton = h("button", { type: "button", onClick: speakDraft }, "Speak draft");
  const autoBox = h("input", { type: "checkbox", id: "chat-auto-speak", onChange: () => speechPrefs.set("auto", autoBox.checked ? "1" : "") });
  const recordButton = h("button", { type: "button", onClick: toggleRecording }, "Start recording");
  const autoSendBox = h("input", { type: "checkbox", onChange: () => speechPrefs.set("send", autoSendBox.checked ? "1" : "") });
  const speechStatus = h("p", { class: "chat-speech-status muted", role: "status", "aria-live": "polite" });
  const audio = h("audio", { controls: true, "aria-label": "Speech playback", hidden: true });
  const ttsRow = h("div", { class: "chat-speech-row" }, h("label", null, "Voice model ", ttsSelect), voiceLabel, speakButton, h("label", { class: "chat-auto", title: "Speak each finished reply" }, autoBox, " Auto"));
  const sttRow = h("div", { class: "chat-speech-row" }, h("label", null, "Listening model ", sttSelect), recordButton, h("label", { class: "chat-auto" }, autoSendBox, " Send when transcribed"));
  const speechNone = h("p", { class: "muted" }, "No speech model is ready: place a text-to-speech or speech-to-text model to speak replies or dictate.");
  const speech = h("fieldset", { class: "chat-speech" }, h("legend", null, "Speech"), speechNone, ttsRow, sttRow, speechStatus, audio);

  replace(
    root,
    ctx.dialog ? null : h("h1", null, "Chat"),
    h(
      "div",
      { class: "chat-layout" },
      h("aside", { class: "chat-sidebar", "aria-label": "Saved conversations" }, newButton, list),
      h(
        "section",
        { class: "chat-main", "aria-label": "Conversation" },
        h("div", { class: "chat-toolbar" }, h("label", { for: "chat-model" }, "Model"), modelSelect, h("label", { for: "chat-max-tokens" }, "Max tokens"), maxTokens, toolsLabel),
        modelStatus,
        log,
        errorSlot,
        form,
        speech,
        progress,
      ),
    ),
  );

  const speechPrefs = {
    get: (k) => {
      try {
        return window.localStorage.getItem(`skulk.chat.speech.${k}`) || "";
      } catch {
        return "";
      }
    },
    set: (k, v) => {
      try {
        window.localStorage.setItem(`skulk.chat.speech.${k}`, v);
      } catch {
        /* storage refused: the choice lasts this visit */
      }
    },
  };
  autoBox.checked = speechPrefs.get("auto") === "1";
  autoSendBox.checked = speechPrefs.get("send") === "1";
  root.classList.add("chat-no-tts");

  // -- models ----------------------------------------------------------------------------
  let catalogLoad = null;
  function loadCatalog() {
    // One read at a time: snapshots arriving meanwhile wait for the same answer.
    catalogLoad = catalogLoad || readCatalog().finally(() => {
      catalogLoad = null;
    });
    return catalogLoad;
  }

  async function readCatalog() {
    try {
      const listing = await api.get("/v1/models", { signal });
      items = listing?.data || [];
    } catch (error) {
      if (error?.name === "AbortError") return;
      modelStatus.textContent = `The model list could not be read: ${error.message}`;
      items = items || [];
    }
  }

  function selected() {
    return models.chat.find((m) => m.id === modelSelect.value) || null;
  }

  function fillSelect(select, options, preferred, emptyText) {
    const keep = preferred && options.some((m) => m.id === preferred) ? preferred : options[0]?.id || "";
    replace(select, options.length ? options.map((m) => h("option", { value: m.id }, m.id)) : h("option", { value: "" }, emptyText));
    select.value = keep;
    select.disabled = options.length === 0;
  }

  async function onState(state) {
    if (items === null || needsCatalog(state)) await loadCatalog();
    if (signal.aborted) return;
    const next = chatModels(items, state);
    const key = JSON.stringify([next.chat.map((m) => m.id), next.tts.map((m) => m.id), next.stt.map((m) => m.id), next.waiting]);
    if (key === modelsKey) return;
    modelsKey = key;
    models = next;
    const conv = current();
    // First fill: a ?model= link (the Models page's "Chat with …") wins over the open
    // conversation's model; afterwards the person's choice stays.
    const first = modelSelect.value === "";
    fillSelect(modelSelect, models.chat, first ? wantedModel || conv?.modelId : modelSelect.value, "No chat model is ready");
    fillSelect(ttsSelect, models.tts, ttsSelect.value || speechPrefs.get("tts"), "No speech model");
    fillVoices();
    fillSelect(sttSelect, models.stt, sttSelect.value || speechPrefs.get("stt"), "No transcription model");
    const loading = models.waiting.length ? ` Still loading: ${models.waiting.join(", ")}.` : "";
    modelStatus.replaceChildren(
      models.chat.length ? `${models.chat.length} model${models.chat.length === 1 ? "" : "s"} ready.${loading}` : `No text model is placed and ready.${loading} `,
      models.chat.length ? "" : h("a", { href: "/catalog" }, "Launch one from Models"),
    );
    ttsRow.hidden = models.tts.length === 0;
    sttRow.hidden = models.stt.length === 0;
    speechNone.hidden = models.tts.length + models.stt.length > 0;
    root.classList.toggle("chat-no-tts", models.tts.length === 0);
    onModelShown();
  }

  function needsCatalog(state) {
    const known = new Set((items || []).map((m) => m.id));
    return Object.values(state.instances || {}).some((tagged) => {
      const body = Object.values(tagged || {})[0];
      const id = body?.shardAssignments?.modelId;
      return id && !known.has(id);
    });
  }

  function fillVoices() {
    const model = models.tts.find((m) => m.id === ttsSelect.value);
    const voices = model?.voices || [];
    const keep = voices.includes(voiceSelect.value) ? voiceSelect.value : model?.defaultVoice || voices[0] || "";
    replace(voiceSelect, voices.map((v) => h("option", { value: v }, v)));
    voiceSelect.value = keep;
    voiceLabel.hidden = voices.length < 2;
  }

  function onModelChange() {
    const conv = current();
    if (conv && conv.modelId !== modelSelect.value) {
      conv.modelId = modelSelect.value;
      persist();
    }
    onModelShown();
  }

  function onModelShown() {
    const model = selected();
    draft.placeholder = model ? `Message ${model.id}` : "No chat model is ready";
    attachBox.hidden = !model?.vision;
    toolsLabel.hidden = !model?.tools;
    if (model && model.id !== toolsFor) {
      toolsFor = model.id;
      toolsBox.checked = webToolsByDefault(model);
    }
    if (!model?.vision && pendingImages.length) {
      pendingImages = [];
      drawAttachments();
    }
    updateBusy();
  }

  // -- conversations ---------------------------------------------------------------------
  function drawList() {
    replace(list, conversationList(store.conversations, store.currentId, { onOpen: openConversation, onDelete: deleteConversation }));
    if (active) for (const button of list.querySelectorAll("button")) button.disabled = true;
  }

  function drawMessages() {
    const conv = current();
    replace(log, (conv?.messages || []).map((m) => messageView(m, { onSpeak: speakText }).article));
    log.scrollTop = log.scrollHeight;
  }

  function openConversation(id) {
    if (active) return;
    store.currentId = id;
    persist();
    clearError();
    drawList();
    drawMessages();
    const conv = current();
    if (conv?.modelId && models.chat.some((m) => m.id === conv.modelId)) modelSelect.value = conv.modelId;
    onModelShown();
    draft.focus();
  }

  function deleteConversation(id) {
    if (active?.conversationId === id) return;
    store.conversations = store.conversations.filter((c) => c.id !== id);
    if (store.currentId === id) store.currentId = store.conversations[0]?.id || null;
    persist();
    drawList();
    drawMessages();
    progress.textContent = "Conversation deleted.";
  }

  function startNew() {
    if (active) return;
    const conv = newConversation(modelSelect.value || null);
    store.conversations.unshift(conv);
    store.currentId = conv.id;
    persist();
    clearError();
    drawList();
    drawMessages();
    draft.focus();
  }

  // -- sending ---------------------------------------------------------------------------
  function onDraftKey(event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  }

  function updateBusy() {
    const busy = Boolean(active);
    stopButton.hidden = !busy;
    sendButton.disabled = busy || !selected();
    newButton.disabled = busy;
    for (const button of list.querySelectorAll("button")) button.disabled = busy;
  }

  async function onSend(event) {
    event.preventDefault();
    const text = draft.value.trim();
    const model = selected();
    if (active || !model) return;
    if (!text && pendingImages.length === 0) {
      progress.textContent = "Type a message first.";
      draft.focus();
      return;
    }
    let conv = current();
    if (!conv) {
      conv = newConversation(model.id);
      store.conversations.unshift(conv);
      store.currentId = conv.id;
    }
    conv.modelId = model.id;
    if (conv.messages.length === 0) conv.title = titleOf(text || "Image");
    conv.messages.push({ role: "user", content: text, images: pendingImages.map((i) => i.url) });
    conv.updatedAt = Date.now();
    store.conversations = [conv, ...store.conversations.filter((c) => c.id !== conv.id)];
    draft.value = "";
    pendingImages = [];
    drawAttachments();
    persist();
    drawList();
    drawMessages();
    await generate(conv.id);
  }

  async function generate(conversationId, round = 0) {
    const conv = store.conversations.find((c) => c.id === conversationId);
    const model = selected();
    if (!conv || !model || active) return;
    clearError();
    const limit = Number.parseInt(maxTokens.value, 10);
    const reply = { role: "assistant", content: "", reasoning: "", model: model.id };
    const view = messageView(reply, { streaming: true, onSpeak: speakText });
    log.append(view.article);
    const controller = new AbortController();
    const onUnmount = () => controller.abort();
    signal.addEventListener("abort", onUnmount);
    active = { controller, commandId: null, stopped: false, conversationId };
    updateBusy();
    progress.textContent = "Generating a reply…";
    const tools = model.tools && toolsBox.checked ? { tools: WEB_TOOLS } : {};
    let followUp = false;
    try {
      const result = await streamChat(
        { model: model.id, messages: toOpenAI(conv.messages), max_tokens: Number.isFinite(limit) && limit > 0 ? limit : DEFAULT_MAX_TOKENS, ...tools },
        {
          signal: controller.signal,
          onStart: (id) => {
            active.commandId = id;
          },
          onDelta: (delta) => {
            reply.content += delta.content;
            reply.reasoning += delta.reasoning;
            view.append(delta);
            log.scrollTop = log.scrollHeight;
          },
        },
      );
      reply.finishReason = result.finishReason;
      const calls = tools.tools && result.finishReason === "tool_calls" ? result.toolCalls.filter((c) => c.name) : [];
      if (calls.length) reply.toolCalls = calls;
      finishReply(conv, reply, view);
      if (calls.length) {
        followUp = await answerToolCalls(conv, calls, controller.signal);
      } else {
        progress.textContent = "Reply finished.";
        if (autoBox.checked && !ttsRow.hidden && reply.content.trim()) speakText(reply.content);
      }
    } catch (error) {
      if (error?.name === "AbortError") {
        if (signal.aborted) return;
        if (!conv.messages.includes(reply)) {
          reply.stopped = true;
          finishReply(conv, reply, view);
        }
        progress.textContent = "Stopped.";
      } else {
        view.article.remove();
        showError(`The reply failed: ${error.message}`, () => generate(conversationId));
        progress.textContent = "";
      }
    } finally {
      signal.removeEventListener("abort", onUnmount);
      active = null;
      if (!signal.aborted) updateBusy();
    }
    if (!followUp || signal.aborted) return;
    if (round + 1 < MAX_TOOL_ROUNDS) await generate(conversationId, round + 1);
    else showError(`The model asked for tools ${MAX_TOOL_ROUNDS} times in a row; send a message to go on.`, null);
  }

  /** Runs the reply's tool calls in order, each answered by a tool message (a call
   * cut short by Stop is answered as stopped). Resolves whether to ask again. */
  async function answerToolCalls(conv, calls, callSignal) {
    let stopped = false;
    for (const call of calls) {
      let out = { content: JSON.stringify({ error: "stopped by the user" }), summary: `${call.name}: stopped.` };
      if (!stopped) {
        progress.textContent = `Running ${call.name}…`;
        try {
          out = await runToolCall(api, call, { signal: callSignal });
        } catch (error) {
          if (error?.name !== "AbortError") throw error;
          stopped = true;
        }
      }
      const message = { role: "tool", name: call.name, toolCallId: call.id, content: out.content, summary: out.summary };
      conv.messages.push(message);
      log.append(messageView(message).article);
    }
    persist();
    if (stopped) progress.textContent = "Stopped.";
    return !stopped;
  }

  function finishReply(conv, reply, view) {
    if (!reply.reasoning) delete reply.reasoning;
    conv.messages.push(reply);
    conv.updatedAt = Date.now();
    view.finish(reply);
    persist();
  }

  function stop() {
    if (!active || active.stopped) return;
    active.stopped = true;
    const id = active.commandId;
    if (id) {
      // The stream's end would cancel it too; the explicit cancel frees the runner now.
      api.post(`/v1/cancel/${encodeURIComponent(id)}`).catch(() => {});
    }
    active.controller.abort();
  }

  function showError(message, retry) {
    replace(errorSlot, errorBox(message, retry ? () => { clearError(); retry(); } : null));
  }
  function clearError() {
    errorSlot.replaceChildren();
  }

  // -- images ----------------------------------------------------------------------------
  function drawAttachments() {
    replace(attachments, attachmentList(pendingImages, (index) => {
      pendingImages.splice(index, 1);
      drawAttachments();
    }));
  }

  async function onAttach() {
    const files = [...(attachInput.files || [])];
    attachInput.value = "";
    for (const file of files) {
      if (!file.type.startsWith("image/")) {
        showError(`${file.name} is not an image.`, null);
        continue;
      }
      if (file.size > MAX_IMAGE_BYTES) {
        showError(`${file.name} is larger than 8 MB.`, null);
        continue;
      }
      const url = await new Promise((resolve, reject) => {
        const reader = new FileReader();
        reader.onload = () => resolve(String(reader.result));
        reader.onerror = () => reject(reader.error);
        reader.readAsDataURL(file);
      });
      pendingImages.push({ name: file.name, url });
    }
    drawAttachments();
    progress.textContent = `${pendingImages.length} image${pendingImages.length === 1 ? "" : "s"} attached.`;
  }

  // -- speech ----------------------------------------------------------------------------
  function speakDraft() {
    const text = draft.value.trim();
    if (!text) {
      speechStatus.textContent = "Nothing to speak: type a draft first.";
      return;
    }
    speakText(text);
  }

  async function speakText(text) {
    const model = models.tts.find((m) => m.id === ttsSelect.value);
    if (!model) {
      speechStatus.textContent = "No speech model is ready.";
      return;
    }
    speechStatus.textContent = "Synthesizing speech…";
    try {
      const voice = model.voices.includes(voiceSelect.value) ? voiceSelect.value : model.defaultVoice;
      const blob = await synthesize({ model: model.id, voice, format: playableFormat(model), text, signal });
      if (audioUrl) URL.revokeObjectURL(audioUrl);
      audioUrl = URL.createObjectURL(blob);
      audio.src = audioUrl;
      audio.hidden = false;
      speechStatus.textContent = "Playing speech.";
      await audio.play().catch(() => {
        speechStatus.textContent = "Speech is ready: press play.";
      });
    } catch (error) {
      if (error?.name === "AbortError") return;
      speechStatus.textContent = "";
      showError(`Speech failed: ${error.message}`, null);
    }
  }

  async function toggleRecording() {
    if (recording) {
      const { handle, base } = recording;
      recording = null;
      recordButton.disabled = true;
      recordButton.textContent = "Start recording";
      speechStatus.textContent = "Transcribing…";
      try {
        const text = await handle.stop();
        draft.value = [base, text].filter(Boolean).join(base && text ? " " : "");
        speechStatus.textContent = text ? "Transcript added to the draft." : "Nothing was heard.";
        draft.focus();
        if (text && autoSendBox.checked && !active) form.requestSubmit();
      } catch (error) {
        if (error?.name === "AbortError") return;
        draft.value = base;
        speechStatus.textContent = "";
        showError(error.message, null);
      } finally {
        recordButton.disabled = false;
      }
      return;
    }
    const problem = microphoneProblem();
    const model = models.stt.find((m) => m.id === sttSelect.value);
    if (problem || !model) {
      speechStatus.textContent = problem || "No transcription model is ready.";
      return;
    }
    recordButton.disabled = true;
    clearError();
    const base = draft.value.trim();
    try {
      const realtime = model.realtime && (await realtimeAdvertised(api, signal));
      const handle = realtime
        ? await startRealtimeRecording({
            model: model.id,
            signal,
            onPartial: (text) => {
              draft.value = [base, text.trim()].filter(Boolean).join(" ");
            },
          })
        : await startBatchRecording({ model: model.id, signal });
      recording = { handle, base };
      recordButton.textContent = "Stop recording";
      speechStatus.textContent = realtime ? "Recording (live transcript)…" : "Recording…";
    } catch (error) {
      if (error?.name === "AbortError") return;
      speechStatus.textContent = "";
      showError(error.message, null);
    } finally {
      recordButton.disabled = false;
    }
  }

  // -- start -----------------------------------------------------------------------------
  drawList();
  drawMessages();
  drawAttachments();
  onModelShown();
  await loadCatalog();
  const unsubscribe = live.subscribe((state) => {
    onState(state).catch((error) => console.error(error));
  });
  return () => {
    unsubscribe();
    if (active) active.controller.abort();
    recording?.handle.cancel();
    if (audioUrl) URL.revokeObjectURL(audioUrl);
    audio.pause();
  };
}
