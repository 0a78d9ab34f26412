// The compaction timeline: one row per record, newest first.
import { h, time, tokens } from "./dom.js";

export function showTimeline(records, openReference) {
  const body = document.querySelector("#timeline tbody");
  document.getElementById("timeline-empty").hidden = records.length > 0;
  body.replaceChildren(
    ...records
      .slice()
      .reverse()
      .map((r) =>
        h(
          "tr",
          { dataset: { layer: r.layer } },
          h("td", {}, time(r.at)),
          h("td", {}, h("span", { class: "badge layer" }, r.layer)),
          h("td", {}, r.reason),
          h("td", {}, `${tokens(r.tokens_before)} → ${tokens(r.tokens_after)}`,
            h("span", { class: "saved" }, ` (−${tokens(r.tokens_before - r.tokens_after)})`)),
          h("td", {}, r.references.map((ref) => h("button", { class: "ref", onclick: () => openReference(ref) }, ref))),
        ),
      ),
  );
}
