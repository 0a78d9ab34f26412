// The server's REST API and its event stream (cookies carry the optional token).

const enc = encodeURIComponent;

export async function getJSON(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  if (!response.ok) throw new Error(`${path}: ${response.status}`);
  return response.json();
}

export const conversations = () => getJSON("/api/conversations?order=recent");
export const history = (id) => getJSON(`/api/conversations/${enc(id)}/history`);
export const status = (id) => getJSON(`/api/conversations/${enc(id)}/status`);
export const usage = (id) => getJSON(`/api/conversations/${enc(id)}/usage`);
export const compactions = (id) => getJSON(`/api/conversations/${enc(id)}/compactions`);
export const currentView = (id) => getJSON(`/api/conversations/${enc(id)}/view`);
export const calls = (id) => getJSON(`/api/conversations/${enc(id)}/calls`);

export async function reference(id, ref) {
  const path = ref.split("/").map(enc).join("/");
  const response = await fetch(`/api/conversations/${enc(id)}/references/${path}`, { credentials: "same-origin" });
  const text = await response.text();
  if (!response.ok) throw new Error(`${response.status}: ${text}`);
  return text;
}

const TYPES = [
  "context.status", "model.completed", "context.compression.required", "context.compression.started",
  "context.compression.completed", "context.compression.failed", "tool_result.truncated",
  "context.offloaded", "history.repaired", "model.recovery.started", "model.recovery.succeeded",
  "model.recovery.failed",
];

// Calls onEvent(type, data) for every event; onState(live) when the connection opens or drops.
export function subscribe(onEvent, onState) {
  const source = new EventSource("/api/events");
  source.onopen = () => onState(true);
  source.onerror = () => onState(false);
  for (const type of TYPES) source.addEventListener(type, (e) => onEvent(type, JSON.parse(e.data)));
  return source;
}
