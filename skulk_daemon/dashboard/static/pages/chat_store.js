// The Chat page's conversations, kept in this browser's localStorage (never on the
// node): a list of conversations, each with its model and messages, and which one is
// open. Reads tolerate anything (a damaged or foreign value starts fresh).

export const STORAGE_KEY = "skulk.chat.v1";
const MAX_CONVERSATIONS = 50;

const newId = () => (crypto.randomUUID ? crypto.randomUUID() : `c${Date.now()}${Math.random().toString(16).slice(2)}`);

export function newConversation(modelId = null) {
  return { id: newId(), title: "New conversation", modelId, messages: [], updatedAt: Date.now() };
}

function valid(message) {
  return message && ["user", "assistant", "tool"].includes(message.role) && typeof message.content === "string";
}

export function load(storage = window.localStorage) {
  let parsed = null;
  try {
    parsed = JSON.parse(storage.getItem(STORAGE_KEY) || "null");
  } catch {
    parsed = null;
  }
  const conversations = Array.isArray(parsed?.conversations)
    ? parsed.conversations
        .filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages))
        .map((c) => ({ ...c, title: typeof c.title === "string" ? c.title : "Conversation", messages: c.messages.filter(valid) }))
    : [];
  const currentId = conversations.some((c) => c.id === parsed?.currentId) ? parsed.currentId : conversations[0]?.id || null;
  return { conversations, currentId };
}

/** Writes the store; when the browser's quota refuses it, drops attached images
 * (the largest part) and tries again. Returns false when even that fails. */
export function save(data, storage = window.localStorage) {
  const trimmed = { ...data, conversations: data.conversations.slice(0, MAX_CONVERSATIONS) };
  try {
    storage.setItem(STORAGE_KEY, JSON.stringify(trimmed));
    return true;
  } catch {
    const lean = {
      ...trimmed,
      conversations: trimmed.conversations.map((c) => ({
        ...c,
        messages: c.messages.map((m) => (m.images?.length ? { ...m, images: [], imagesDropped: m.images.length } : m)),
      })),
    };
    try {
      storage.setItem(STORAGE_KEY, JSON.stringify(lean));
      return true;
    } catch {
      return false;
    }
  }
}

/** A title from the first user message: its first line, bounded. */
export function titleOf(text) {
  const line = String(text).trim().split(/\r?\n/)[0] || "Conversation";
  return line.length > 48 ? `${line.slice(0, 47)}…` : line;
}

/** The OpenAI messages for a conversation: images as image_url content parts. */
export function toOpenAI(messages) {
  return messages.map((m) => {
    if (m.role === "user" && m.images?.length) {
      return {
        role: "user",
        content: [{ type: "text", text: m.content }, ...m.images.map((url) => ({ type: "image_url", image_url: { url } }))],
      };
    }
    if (m.role === "tool") return { role: "tool", tool_call_id: m.toolCallId, content: m.content };
    if (m.toolCalls?.length) {
      const calls = m.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
      return { role: "assistant", content: m.content || null, tool_calls: calls };
    }
    return { role: m.role, content: m.content };
  });
}
