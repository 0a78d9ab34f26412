// The dashboard: follow the newest active conversation (unless the URL or the user names one),
// replay its past from the store, keep it current from the event stream.
import * as api from "./api.js";
import { showChart, showSaved } from "./chart.js";
import { h, time, tokens } from "./dom.js";
import { showLocal, showScopes, showUsage } from "./indicator.js";
import { showCalls, showView } from "./inspector.js";
import { resetTimeline, showTimeline } from "./timeline.js";

const $ = (id) => document.getElementById(id);
const select = $("conversation");
const callSelect = $("call");
let current = null;
let refreshing = null;
let pending = false;
// Named in the URL or picked by the user: then the dashboard stays on it.
let pinned = location.hash.length > 1;
// Milliseconds of each conversation's latest known activity (store records, events seen here).
const activity = new Map();
// The current conversation stays while its events keep coming; a quiet one gives way to a newer active one.
const QUIET_MS = 5000;
const heard = new Map();
let replayPending = null;

const noteActivity = (id, ms) => activity.set(id, Math.max(activity.get(id) || 0, ms));
const quiet = (id) => !id || Date.now() - (heard.get(id) || 0) > QUIET_MS;

// Live (served here) first, then the most recent activity.
function newest(list) {
  const score = (c) => [c.live ? 1 : 0, activity.get(c.id) || 0];
  const sorted = list.slice().sort((a, b) => {
    const [la, ta] = score(a), [lb, tb] = score(b);
    return lb - la || tb - ta;
  });
  return sorted.length ? sorted[0].id : null;
}

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
  for (const c of list) if (c.active_at) noteActivity(c.id, c.active_at * 1000);
  const named = decodeURIComponent(location.hash.replace(/^#/, ""));
  let wanted = current;
  if (pinned) wanted = named || current;
  else if (quiet(current) || !ids.includes(current)) wanted = newest(list);
  select.replaceChildren(...list.map((c) => h("option", { value: c.id }, `${c.id} (${c.messages})`)));
  if (wanted && ids.includes(wanted)) select.value = wanted;
  if (select.value && select.value !== current) choose(select.value, false);
}

function showCapacity(history) {
  const el = $("capacity");
  el.dataset.source = history.capacity_source;
  el.textContent = history.window === null
    ? `capacity unknown (${history.capacity_source})`
    : `${tokens(history.window)} tokens · source: ${history.capacity_source}`;
}

async function refresh() {
  if (!current) return;
  const id = current;
  const [status, scopes, records, calls, past] = await Promise.all([
    api.status(id), api.usage(id), api.compactions(id), api.calls(id), api.history(id),
  ]);
  if (id !== current) return;
  if (replayPending === id) {
    replayPending = null;
    for (const e of past.events.slice().reverse()) logEvent(e.type, e.data, true);
  }
  showCapacity(past);
  showChart(past);
  showSaved(past.saved);
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

// `picked`: the user chose it, so it is pinned and the URL names it.
function choose(id, picked) {
  current = id;
  if (picked) {
    pinned = true;
    history.replaceState(null, "", `#${encodeURIComponent(id)}`);
  }
  $("events").replaceChildren();
  replayPending = id;
  resetTimeline();
  scheduleRefresh();
}

// Replayed events are older than any shown live, so they go below them.
function logEvent(type, data, replayed = false) {
  const detail = {
    "context.status": () => `${data.state ?? "?"} ${data.ratio != null ? (data.ratio * 100).toFixed(1) + " %" : ""} ${data.compact_layer ?? ""}`,
    "model.completed": () => `${data.input_tokens ?? "?"} in / ${data.output_tokens ?? "?"} out · ${data.usage_status}`,
    "context.compression.completed": () => `${data.layer} ${data.tokens_before} → ${data.tokens_after}`,
  }[type];
  const list = $("events");
  const item = h("li", { class: replayed ? "replayed" : null, dataset: { type } },
    h("span", { class: "when" }, time(data.timestamp)), " ", h("strong", {}, type), detail ? ` ${detail()}` : "",
    data.synthesized ? h("span", { class: "note" }, " (polled)") : null,
    replayed ? h("span", { class: "note" }, " (from the store)") : null);
  if (replayed) list.append(item);
  else list.prepend(item);
  while (list.children.length > 50) list.lastChild.remove();
}

function onEvent(type, data) {
  noteActivity(data.conversation_id, Date.now());
  heard.set(data.conversation_id, Date.now());
  const known = [...select.options].some((o) => o.value === data.conversation_id);
  if (!current || !known || (!pinned && data.conversation_id !== current && quiet(current))) {
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

select.addEventListener("change", () => choose(select.value, true));
callSelect.addEventListener("change", scheduleRefresh);
api.subscribe(onEvent, onState);
loadConversations().catch((error) => console.warn(error));
setInterval(() => loadConversations().catch(() => {}), 5000);
