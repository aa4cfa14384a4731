// The broker's state an operator looks for first, from /api/overview: memory held
// against where durable queues page and where producers wait, the journal's disk free
// against disk_free_limit, the producers waiting for memory or disk (and why), and the
// connections the broker does not read because their producer waits. An item that says
// producers wait turns red. A user who may manage only some destinations does not get
// the overview (403): the panel stays hidden for them.
import { bytes, h, num } from "./lib.js";

function meter(fill) {
  const bar = h("i", {});
  bar.style.width = `${Math.round(Math.min(1, Math.max(0, fill)) * 100)}%`; // CSSOM: CSP allows it
  return h("div", { class: "meter" }, bar);
}

function item(key, label, value, detail, { alarm = false, fill = null } = {}) {
  return h("div", { class: `state-item${alarm ? " alarm" : ""}`, dataset: { state: key } },
    h("div", { class: "label" }, label),
    h("div", { class: "value" }, value),
    fill === null ? null : meter(fill),
    h("div", { class: "detail muted" }, detail));
}

export function renderState(o, el) {
  if (!o) {
    el.hidden = true;
    el.replaceChildren();
    return;
  }
  const memory = o.memory || {};
  const disk = o.disk || {};
  const producers = o.producers || {};
  const high = memory.high_watermark || 0;
  const low = memory.low_watermark || 0;
  const held = memory.held || 0;
  const limit = disk.free_limit || 0;
  const waiting = producers.waiting || 0;
  const blocked = o.blocked_connections || 0;
  el.hidden = false;
  el.replaceChildren(
    item("memory", "Memory", bytes(held),
      high ? `of ${bytes(high)} before producers wait (they go on under ${bytes(low)}); durable queues page at ${bytes(memory.paging_at)}`
        : `no limit; durable queues page at ${bytes(memory.paging_at)}`,
      { alarm: Boolean(high) && held >= high, fill: high ? held / high : null }),
    item("disk", "Disk free", typeof disk.free_bytes === "number" ? bytes(disk.free_bytes) : "–",
      disk.low ? disk.low : limit ? `producers wait under ${bytes(limit)}` : "no limit",
      { alarm: Boolean(disk.low) }),
    item("producers", "Producers waiting", num(waiting),
      producers.blocked_by ? producers.blocked_by : "for memory or disk: none",
      { alarm: waiting > 0 || Boolean(producers.blocked_by) }),
    item("blocked", "Blocked connections", num(blocked),
      "not read while their producer waits for room or for consumers",
      { alarm: blocked > 0 }));
}
