// The context-window indicator: provider-confirmed usage (the seed's UI states) and the local count.
import { h, percent, setBar, tokens } from "./dom.js";

const $ = (id) => document.getElementById(id);

function usageKind(usage) {
  if (usage.compression_required) return "required";
  if (usage.status === "BASELINE_INVALIDATED") return "invalidated";
  if (usage.status === "NO_CONFIRMED_USAGE") return "none";
  return usage.ratio === null ? "unknown-capacity" : "confirmed";
}

// The one-word phase the indicator is in (what a glance, or a test, reads).
function phase(card) {
  const usage = card.dataset.usage;
  if (usage === "required") return "required";
  if (usage === "invalidated") return "compacted";
  return card.dataset.state;
}

export function showUsage(usage) {
  const card = $("indicator");
  card.dataset.usage = usageKind(usage);
  card.dataset.phase = phase(card);
  $("confirmed-text").textContent = usage.ui_text;
  $("confirmed-text").title = usage.ui_text_zh;
  setBar($("confirmed-bar"), usage.valid ? usage.ratio : null, card.dataset.usage);
}

// Other agents (or models) that recorded calls in this conversation: their own confirmed usage.
export function showScopes(scopes) {
  const others = scopes.filter((s) => !s.served);
  $("scopes").hidden = others.length === 0;
  $("scopes").replaceChildren(...others.map((s) =>
    h("li", { dataset: { scope: s.scope } }, `also ${s.scope}: ${tokens(s.baseline)} tokens confirmed · ${s.status}`)));
}

// `status` is a context.status event (or the API's `context`): a local count of the view.
export function showLocal(status) {
  const card = $("indicator");
  const state = status.state || "unknown";
  card.dataset.state = state;
  card.dataset.phase = phase(card);
  $("local-state").textContent = state;
  $("local-state").dataset.state = state;
  $("local-text").textContent =
    status.ratio === null || status.ratio === undefined
      ? `${tokens(status.used)} tokens (capacity unknown)`
      : `${percent(status.ratio)} · ${tokens(status.used)} of ${tokens(status.budget)} tokens` +
        (status.compact_layer ? ` · after ${status.compact_layer}` : "");
  setBar($("local-bar"), status.ratio, state);
}
