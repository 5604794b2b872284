// The Chat page's pieces of DOM that hold no behaviour of their own: one message, the
// conversation list, the attachment previews. Server and model text enter as text nodes.

import { h } from "../dom.js";

const LABELS = { user: "User message", tool: "Tool result" };

/** One message as an article named "User message", "Assistant message" or, for what a
 * web tool answered, "Tool result" (its summary shown; the model got the JSON). */
export function messageView(message, { streaming = false, onSpeak = null } = {}) {
  const isUser = message.role === "user";
  const isTool = message.role === "tool";
  const text = h("div", { class: "chat-text" }, isTool ? message.summary || message.content : message.content);
  const reasoningText = h("div", { class: "chat-reasoning-text" }, message.reasoning || "");
  const reasoning = h(
    "details",
    { class: "chat-reasoning", hidden: !message.reasoning },
    h("summary", null, "Reasoning"),
    reasoningText,
  );
  const note = h("p", { class: "chat-note muted" }, noteOf(message));
  const speak = !isUser && !isTool && onSpeak
    ? h("button", { type: "button", class: "chat-speak", onClick: () => onSpeak(message.content), disabled: streaming }, "Speak reply")
    : null;
  const article = h(
    "article",
    { class: ["chat-message", isUser ? "chat-user" : isTool ? "chat-tool" : "chat-assistant"], "aria-label": LABELS[message.role] || "Assistant message", "aria-busy": streaming ? "true" : null },
    h("p", { class: "chat-role muted" }, isUser ? "You" : isTool ? `Tool: ${message.name}` : message.model || "Assistant"),
    isUser || isTool ? null : reasoning,
    text,
    (message.images || []).length ? h("div", { class: "chat-images" }, message.images.map((src) => h("img", { src, alt: "Attached image" }))) : null,
    message.imagesDropped ? h("p", { class: "muted" }, `${message.imagesDropped} attached image(s) were not kept: the browser's storage is full.`) : null,
    note,
    speak,
  );
  return {
    article,
    /** Streamed tokens land here (text nodes, appended). */
    append({ content, reasoning: thought }) {
      if (thought) {
        reasoning.hidden = false;
        if (!reasoning.dataset.touched) reasoning.open = true;
        reasoningText.append(thought);
      }
      if (content) text.append(content);
    },
    finish(done) {
      article.removeAttribute("aria-busy");
      if (!done.reasoning) reasoning.hidden = true;
      else reasoning.open = false;
      note.textContent = noteOf(done);
      if (speak) speak.disabled = false;
    },
  };
}

function noteOf(message) {
  if (message.role !== "assistant") return "";
  if (message.stopped) return "Stopped.";
  if (message.toolCalls?.length) return `Asked to use ${message.toolCalls.map((c) => c.name).join(", ")}.`;
  if (message.finishReason === "length") return "Reached the token limit.";
  if (!message.content && !message.reasoning && message.finishReason) return "The model answered nothing.";
  return "";
}

/** The list of saved conversations: open one, or delete it. */
export function conversationList(conversations, currentId, { onOpen, onDelete }) {
  if (conversations.length === 0) return h("p", { class: "muted" }, "No conversations yet.");
  return h(
    "ul",
    { class: "chat-conversations", "aria-label": "Conversations" },
    conversations.map((c) =>
      h(
        "li",
        { class: c.id === currentId ? "current" : null },
        h("button", { type: "button", class: "chat-open", "aria-current": c.id === currentId ? "true" : null, onClick: () => onOpen(c.id) }, c.title),
        h("button", { type: "button", class: "chat-delete", "aria-label": `Delete conversation ${c.title}`, title: "Delete", onClick: () => onDelete(c.id) }, "×"),
      ),
    ),
  );
}

/** Thumbnails of the images waiting to be sent, each removable. */
export function attachmentList(images, onRemove) {
  if (images.length === 0) return null;
  return h(
    "ul",
    { class: "chat-attachments", "aria-label": "Attached images" },
    images.map((image, index) =>
      h(
        "li",
        null,
        h("img", { src: image.url, alt: image.name }),
        h("button", { type: "button", "aria-label": `Remove ${image.name}`, onClick: () => onRemove(index) }, "×"),
      ),
    ),
  );
}
