// The dashboard: pick a conversation, keep it current from the event stream.
import * as api from "./api.js";
import { h, time } from "./dom.js";
import { showLocal, showScopes, showUsage } from "./indicator.js";
import { showCalls, showView } from "./inspector.js";
import { showTimeline } from "./timeline.js";

const $ = (id) => document.getElementById(id);
const select = $("conversation");
const callSelect = $("call");
let current = null;
let refreshing = null;
let pending = false;

async function openReference(ref) {
  $("reference-title").textContent = ref;
  $("reference-text").textContent = "loading…";
  $("reference").showModal();
  try {
    $("reference-text").textContent = await api.reference(current, ref);
  } catch (error) {
    $("reference-text").textContent = `could not read it: ${error.message}`;
  }
}

async function loadConversations() {
  const list = await api.conversations();
  const ids = list.map((c) => c.id);
  const wanted = decodeURIComponent(location.hash.replace(/^#/, "")) || current || ids[0] || null;
  select.replaceChildren(...list.map((c) => h("option", { value: c.id }, `${c.id} (${c.messages})`)));
  if (wanted && ids.includes(wanted)) select.value = wanted;
  if (select.value && select.value !== current) choose(select.value);
}

async function refresh() {
  if (!current) return;
  const id = current;
  const [status, scopes, records, calls] = await Promise.all([
    api.status(id), api.usage(id), api.compactions(id), api.calls(id),
  ]);
  if (id !== current) return;
  showUsage(status.usage);
  showScopes(scopes);
  showLocal(status.context);
  showTimeline(records.records, openReference);
  showCalls(callSelect, calls, callSelect.value);
  if (callSelect.value === "current") {
    const view = await api.currentView(id);
    showView(view.messages, `next call · ${view.tokens.toLocaleString("en-US")} tokens`, openReference);
  } else {
    const call = calls.find((c) => String(c.call) === callSelect.value);
    showView(call.messages, `proxied call #${call.call} at ${time(call.at)}`, openReference);
  }
}

// At most one refresh in flight; events arriving meanwhile cause one more afterwards.
function scheduleRefresh() {
  if (refreshing) {
    pending = true;
    return;
  }
  refreshing = refresh()
    .catch((error) => console.warn("refresh failed", error))
    .finally(() => {
      refreshing = null;
      if (pending) {
        pending = false;
        scheduleRefresh();
      }
    });
}

function choose(id) {
  current = id;
  history.replaceState(null, "", `#${encodeURIComponent(id)}`);
  $("events").replaceChildren();
  scheduleRefresh();
}

function logEvent(type, data) {
  const detail = {
    "context.status": () => `${data.state ?? "?"} ${data.ratio != null ? (data.ratio * 100).toFixed(1) + " %" : ""} ${data.compact_layer ?? ""}`,
    "model.completed": () => `${data.input_tokens ?? "?"} in / ${data.output_tokens ?? "?"} out · ${data.usage_status}`,
    "context.compression.completed": () => `${data.layer} ${data.tokens_before} → ${data.tokens_after}`,
  }[type];
  const list = $("events");
  list.prepend(h("li", { dataset: { type } }, h("span", { class: "when" }, time(data.timestamp)), " ",
    h("strong", {}, type), detail ? ` ${detail()}` : "", data.synthesized ? h("span", { class: "note" }, " (polled)") : null));
  while (list.children.length > 50) list.lastChild.remove();
}

function onEvent(type, data) {
  if (!current || ![...select.options].some((o) => o.value === data.conversation_id)) {
    loadConversations().catch(() => {});
  }
  if (data.conversation_id !== current) return;
  logEvent(type, data);
  if (type === "context.status") showLocal(data);
  scheduleRefresh();
}

function onState(live) {
  const badge = $("connection");
  badge.dataset.live = String(live);
  badge.textContent = live ? "live" : "reconnecting…";
  if (live) loadConversations().then(scheduleRefresh).catch(() => {});
}

select.addEventListener("change", () => choose(select.value));
callSelect.addEventListener("change", scheduleRefresh);
api.subscribe(onEvent, onState);
loadConversations().catch((error) => console.warn(error));
setInterval(() => loadConversations().catch(() => {}), 5000);
