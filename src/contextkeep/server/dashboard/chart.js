// The view-tokens chart (inline SVG, like the replay report): one point per call (or per
// compaction's before/after when another process made the calls), the budget lines, markers by layer.
import { h, tokens } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";
const W = 640, H = 220, PAD = { left: 56, right: 90, top: 12, bottom: 24 };
const LAYER_COLORS = { L0: "#8e6bd8", L1: "#2a9d8f", L2: "#e9c46a", L3: "#f4a261", L4: "#e63946" };
const OTHER = "#555";
const LINES = [["budget", "#d23a3a"], ["trigger", "#d99a00"], ["target", "#2f9e63"]];

function svg(tag, attrs, text) {
  const el = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  if (text !== undefined) el.textContent = text;
  return el;
}

export function showChart(history) {
  const { points, markers, unit } = history.chart;
  const box = document.getElementById("chart");
  const lines = LINES.filter(([name]) => history[name] !== null && history[name] !== undefined);
  const top = Math.max(1, ...points.map((p) => p.tokens), ...lines.map(([name]) => history[name]));
  const x = (i) => PAD.left + (points.length > 1 ? (i / (points.length - 1)) * (W - PAD.left - PAD.right) : 0);
  const y = (v) => H - PAD.bottom - (v / top) * (H - PAD.top - PAD.bottom);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "view tokens per call" });
  chart.append(svg("line", { x1: PAD.left, x2: PAD.left, y1: PAD.top, y2: H - PAD.bottom, stroke: "#aaa" }));
  chart.append(svg("text", { x: PAD.left - 4, y: PAD.top + 8, "text-anchor": "end", "font-size": 10 }, tokens(top)));
  for (const [name, color] of lines) {
    const at = y(history[name]);
    chart.append(svg("line", { class: `limit ${name}`, x1: PAD.left, x2: W - PAD.right, y1: at, y2: at,
      stroke: color, "stroke-dasharray": "4 3" }));
    chart.append(svg("text", { x: W - PAD.right + 4, y: at + 3, "font-size": 10, fill: color },
      `${name} ${tokens(history[name])}`));
  }
  chart.append(svg("polyline", { class: "view", fill: "none", stroke: "#264653", "stroke-width": 1.6,
    points: points.map((p, i) => `${x(i).toFixed(1)},${y(p.tokens).toFixed(1)}`).join(" ") }));
  for (const m of markers) {
    const p = points[m.at];
    const dot = svg("circle", { class: "marker", cx: x(m.at), cy: y(p.tokens), r: 4,
      fill: LAYER_COLORS[m.layer] || OTHER, "data-layer": m.layer });
    dot.append(svg("title", {}, `${m.layer}: ${tokens(p.tokens)} tokens after`));
    chart.append(dot);
  }
  const legend = [...new Set(markers.map((m) => m.layer))].map((layer) =>
    h("span", { class: "legend", style: `color:${LAYER_COLORS[layer] || OTHER}` }, `● ${layer} `));
  const note = unit === "call" ? `${points.length} proxied calls` :
    `${markers.length} compactions (before → after), then the next view; the calls were made elsewhere`;
  box.replaceChildren(chart, h("p", { class: "note" }, note, " ", legend));
}

// Tokens saved per layer, L0 (tool results cut at ingest) first.
export function showSaved(saved) {
  const layers = Object.keys(saved).sort();
  document.getElementById("saved").replaceChildren(...layers.map((layer) =>
    h("li", { dataset: { layer } }, h("span", { class: "badge layer" }, layer), ` −${tokens(saved[layer])} tokens`)));
}
