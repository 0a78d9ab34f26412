// The compaction timeline: one row per record, newest first, a page at a time.
import { h, time, tokens } from "./dom.js";

export const PAGE_SIZE = 10;
let page = 0;
let shown = { records: [], openReference: null };

function row(r, openReference) {
  return h(
    "tr",
    { dataset: { layer: r.layer } },
    h("td", {}, time(r.at)),
    h("td", {}, h("span", { class: "badge layer" }, r.layer)),
    h("td", {}, r.reason),
    h("td", {}, `${tokens(r.tokens_before)} → ${tokens(r.tokens_after)}`,
      h("span", { class: "saved" }, ` (−${tokens(r.tokens_before - r.tokens_after)})`)),
    h("td", {}, r.references.map((ref) => h("button", { class: "ref", onclick: () => openReference(ref) }, ref))),
  );
}

function render() {
  const { records, openReference } = shown;
  const pages = Math.max(1, Math.ceil(records.length / PAGE_SIZE));
  page = Math.min(page, pages - 1);
  const newest = records.slice().reverse().slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE);
  document.getElementById("timeline-empty").hidden = records.length > 0;
  document.querySelector("#timeline tbody").replaceChildren(...newest.map((r) => row(r, openReference)));
  document.getElementById("timeline-pager").hidden = pages === 1;
  document.getElementById("timeline-page").textContent = `page ${page + 1} of ${pages} · ${records.length} compactions`;
  document.getElementById("timeline-newer").disabled = page === 0;
  document.getElementById("timeline-older").disabled = page === pages - 1;
}

// The page stays where the reader put it; new records push older ones to later pages.
export function showTimeline(records, openReference) {
  shown = { records, openReference };
  render();
}

export function resetTimeline() {
  page = 0;
}

document.getElementById("timeline-newer").addEventListener("click", () => { page -= 1; render(); });
document.getElementById("timeline-older").addEventListener("click", () => { page += 1; render(); });
