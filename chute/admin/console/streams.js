// A stream in the console: an append-only log its readers read from an offset. What a
// destination's page shows of one beyond a queue's counters: its offsets (first..head),
// what retention removed, and each reader with how far behind the head it is. A stream
// keeps its messages for every reader: the counters a queue has for messages leaving
// (ready, acked, expired, dead-lettered) mean nothing for it and are left out.
import { h, num } from "./lib.js";

export const isStreamAddress = (address) => String(address).startsWith("stream:");

// The queue counters a stream's page leaves out.
export const NOT_A_STREAMS = new Set(["ready", "acked", "expired", "dead_lettered"]);

// Offsets a reader at `position` has yet to read (retention may have removed some of them).
export function lag(d, position) {
  return Math.max(0, d.head - Math.max(position, d.first));
}

// The counters of a stream's own: [key, label, value] for the page's counter boxes.
export function streamCounters(d) {
  const readers = d.readers || [];
  return [
    ["first", "First offset", num(d.first)],
    ["head", "Head offset", num(d.head)],
    ["removed", "Removed", num(d.removed)],
    ["readers", "Readers", num(readers.length)],
    ["lag", "Most behind", num(readers.reduce((most, r) => Math.max(most, lag(d, r.position)), 0))],
  ];
}

// The readers of a stream, each with its position and how far behind the head it is.
export function readersTable(d) {
  const readers = d.readers || [];
  return h("div", { id: "detail-readers" },
    h("h2", {}, "Readers"),
    h("div", { class: "card" }, readers.length ? h("table", { id: "reader-table" },
      h("thead", {}, h("tr", {},
        h("th", { class: "num" }, "Position"), h("th", { class: "num" }, "Behind head"),
        h("th", { class: "num" }, "Consumers"))),
      h("tbody", {}, readers.map((r) => h("tr", { dataset: { position: r.position } },
        h("td", { class: "num" }, num(r.position)),
        h("td", { class: "num lag" }, num(lag(d, r.position))),
        h("td", { class: "num" }, num(r.consumers))))))
      : h("p", { class: "empty" }, "No readers.")));
}
