// Building DOM safely: text always goes through textContent, never innerHTML.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export const tokens = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"));

export const percent = (ratio) => `${(ratio * 100).toFixed(1)} %`;

export const time = (unix) => new Date(unix * 1000).toLocaleTimeString();

export function setBar(el, ratio, state) {
  el.style.width = ratio === null || ratio === undefined ? "0" : `${Math.min(ratio, 1) * 100}%`;
  el.dataset.state = state || "none";
}
