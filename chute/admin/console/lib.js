// The chute console's building blocks: DOM and SVG construction, number formats,
// the admin API call with its errors, the confirm dialog, and the charts (hand-drawn
// SVG polylines of the last SAMPLES samples). Nothing here holds the page's state.

export const SAMPLES = 60;
export const DEAD_LETTER_PREFIX = "queue:__sys__deadLetter";
const SVG_NS = "http://www.w3.org/2000/svg";

// ---------------------------------------------------------------- small helpers

export function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "checked") el.checked = Boolean(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

export function svg(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  el.append(...kids);
  return el;
}

const integer = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const decimal = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });

export function num(value) {
  return typeof value === "number" && Number.isFinite(value) ? integer.format(value) : "–";
}

export function rate(value) {
  if (typeof value !== "number" || !Number.isFinite(value)) return "–";
  return value >= 100 ? integer.format(value) : decimal.format(value);
}

export function bytes(value) {
  if (typeof value !== "number") return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let n = value;
  let unit = 0;
  while (n >= 1024 && unit < units.length - 1) {
    n /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? integer.format(n) : decimal.format(n)} ${units[unit]}`;
}

export function duration(seconds) {
  if (typeof seconds !== "number" || !Number.isFinite(seconds)) return "–";
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

export function when(ms) {
  if (typeof ms !== "number" || ms <= 0) return "–";
  return new Date(ms).toLocaleString();
}

export function isDeadLetterAddress(address) {
  return address.startsWith(DEAD_LETTER_PREFIX);
}

export function plural(n, word) {
  return `${num(n)} ${word}${n === 1 ? "" : "s"}`;
}

// ---------------------------------------------------------------- the API

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function api(method, path, body) {
  const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, "unreachable",
      `Cannot reach the broker at ${location.host}: is chute serve running? ` +
      "The console tries again every 2 seconds.");
  }
  if (response.status === 204) return {};
  const text = await response.text();
  let doc = null;
  try {
    doc = text ? JSON.parse(text) : {};
  } catch (err) {
    doc = null;
  }
  if (response.ok && doc !== null) return doc;
  if (response.status === 401) {
    throw new ApiError(401, (doc && doc.error) || "unauthorized",
      "The broker asks for a login: reload the page and sign in as a user with the " +
      "manage permission.");
  }
  const code = (doc && doc.error) || `http-${response.status}`;
  const message = (doc && doc.message) ||
    `${method} ${path} answered HTTP ${response.status}${text ? `: ${text.slice(0, 200)}` : ""}`;
  throw new ApiError(response.status, code, message);
}

export const enc = encodeURIComponent;
export const destinationPath = (address) => `/api/destinations/${enc(address)}`;

// ---------------------------------------------------------------- the dialog

export function ask({ title, text, okLabel = "OK", danger = false, input = null }) {
  const dialog = document.getElementById("dialog");
  const field = document.getElementById("dialog-input");
  const ok = document.getElementById("dialog-ok");
  const cancel = document.getElementById("dialog-cancel");
  document.getElementById("dialog-title").textContent = title;
  document.getElementById("dialog-text").textContent = text;
  ok.textContent = okLabel;
  ok.className = danger ? "danger" : "";
  field.hidden = input === null;
  field.value = input === null ? "" : input;
  return new Promise((resolve) => {
    const finish = (answer) => {
      ok.removeEventListener("click", onOk);
      cancel.removeEventListener("click", onCancel);
      field.removeEventListener("keydown", onKey);
      dialog.removeEventListener("cancel", onCancel);
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    const onOk = () => finish(input === null ? true : field.value.trim());
    const onCancel = (event) => { if (event) event.preventDefault(); finish(null); };
    const onKey = (event) => { if (event.key === "Enter") onOk(); };
    ok.addEventListener("click", onOk);
    cancel.addEventListener("click", onCancel);
    field.addEventListener("keydown", onKey);
    dialog.addEventListener("cancel", onCancel);
    dialog.showModal();
    (input === null ? cancel : field).focus();
  });
}

// ---------------------------------------------------------------- charts

// A chart of the last SAMPLES samples of each series, the newest at the right.
export function chart(series, { width, height, area = false, grid = false, title = "" }) {
  const values = series.flatMap((s) => s.values);
  const max = Math.max(1, ...values);
  const top = grid ? 14 : 2;
  const bottom = height - (grid ? 4 : 2);
  const x = (i) => 1 + (i * (width - 2)) / (SAMPLES - 1);
  const y = (v) => bottom - (v / max) * (bottom - top);
  const el = svg("svg", {
    viewBox: `0 0 ${width} ${height}`, class: grid ? "spark big" : "spark",
    width, height, role: "img", "aria-label": title,
  });
  if (title) el.append(svg("title", {}, title));
  if (grid) {
    for (const frac of [0, 0.5, 1]) {
      const gy = bottom - frac * (bottom - top);
      el.append(svg("line", { x1: 0, x2: width, y1: gy, y2: gy, class: "grid" }));
    }
    el.append(svg("text", { x: 4, y: top - 3 }, rate(max)));
  } else {
    el.append(svg("line", { x1: 0, x2: width, y1: bottom + 0.5, y2: bottom + 0.5, class: "grid" }));
  }
  for (const s of series) {
    if (!s.values.length) continue;
    const offset = SAMPLES - s.values.length;
    const points = s.values.map((v, i) => `${x(offset + i).toFixed(1)},${y(v).toFixed(1)}`);
    if (area && s.values.length > 1) {
      el.append(svg("polygon", {
        class: s.cls,
        points: `${x(offset).toFixed(1)},${bottom} ${points.join(" ")} ${x(SAMPLES - 1).toFixed(1)},${bottom}`,
      }));
    }
    el.append(svg("polyline", { class: s.cls, points: points.join(" ") }));
    if (!grid) {
      const last = s.values[s.values.length - 1];
      el.append(svg("circle", { class: s.cls, cx: x(SAMPLES - 1), cy: y(last), r: 1.8 }));
    }
  }
  return el;
}

export function depthChart(hist, big = false) {
  const values = hist ? hist.depth : [];
  return chart([{ cls: "depth", values }], big
    ? { width: 600, height: 150, area: true, grid: true, title: "Depth over the last 2 minutes" }
    : { width: 120, height: 28, area: true, title: `Depth: ${num(values[values.length - 1])}` });
}

export function rateChart(hist, big = false) {
  const enq = hist ? hist.enq : [];
  const del = hist ? hist.del : [];
  return chart([{ cls: "enq", values: enq }, { cls: "del", values: del }], big
    ? { width: 600, height: 150, grid: true, title: "Enqueued and delivered per second" }
    : {
      width: 120, height: 28,
      title: `Enqueued ${rate(enq[enq.length - 1])}/s, delivered ${rate(del[del.length - 1])}/s`,
    });
}
