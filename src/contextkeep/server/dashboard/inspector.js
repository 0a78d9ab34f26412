// The inspector: exactly what the model saw, compaction's changes and references marked.
import { h, tokens } from "./dom.js";

const LABELS = {
  summary: "summary", dropped: "dropped rounds", masked: "masked output", truncated: "truncated",
  media_removed: "media removed", rewritten: "rewritten", synthetic: "synthesized result",
};

function toolCalls(message) {
  return (message.tool_calls || []).map((c) => h("div", { class: "call" }, `→ ${c.name}(${c.arguments})`));
}

function item(message, openReference) {
  const kind = message.kind;
  return h(
    "li",
    { class: "message", dataset: { role: message.role, kind: kind || "original" } },
    h("div", { class: "meta" },
      h("span", { class: "badge role" }, message.role),
      kind ? h("span", { class: "badge kind" }, LABELS[kind] || kind) : null,
      message.id ? h("span", { class: "id" }, message.id) : null,
      message.tool_call_id ? h("span", { class: "id" }, `result of ${message.tool_call_id}`) : null),
    message.text ? h("pre", {}, message.text) : null,
    toolCalls(message),
    message.references.length
      ? h("div", { class: "refs" }, message.references.map((ref) =>
          h("button", { class: "ref", onclick: () => openReference(ref) }, ref)))
      : null,
  );
}

export function showView(messages, summary, openReference) {
  const counts = {};
  for (const m of messages) if (m.kind) counts[m.kind] = (counts[m.kind] || 0) + 1;
  const marks = Object.entries(counts).map(([k, n]) => `${n} ${LABELS[k] || k}`).join(", ");
  document.getElementById("inspector-summary").textContent =
    `${summary} · ${messages.length} messages` + (marks ? ` · ${marks}` : "");
  document.getElementById("inspector").replaceChildren(...messages.map((m) => item(m, openReference)));
}

export function showCalls(select, calls, chosen) {
  const options = [h("option", { value: "current" }, "Next call (current view)")];
  for (const c of calls.slice().reverse()) {
    options.push(h("option", { value: String(c.call) }, `Proxied call #${c.call} · ${tokens(c.tokens)} tokens`));
  }
  select.replaceChildren(...options);
  select.value = options.some((o) => o.value === chosen) ? chosen : "current";
}
