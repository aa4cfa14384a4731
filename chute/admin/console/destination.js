// One destination's page (#/destination/<address>): its kind, counters, depth and rate
// charts, consumers, a topic's subscriptions, a stream's readers (streams.js), the
// Publish and Get cards (publish.js), a queue's or stream's messages (messages.js), and
// the Purge and Delete buttons.
import {
  api, ask, bytes, depthChart, destinationPath, h, num, plural, rate, rateChart,
} from "./lib.js";
import { consumersTable } from "./connections.js";
import { kindChip, subKey } from "./destinations.js";
import { afterChange, loadMessages, messagesFrame, showTaken } from "./messages.js";
import { act, currentView, notice, state } from "./page.js";
import { tick } from "./poll.js";
import { publishFrame } from "./publish.js";
import { NOT_A_STREAMS, isStreamAddress, readersTable, streamCounters } from "./streams.js";

const COUNTERS = [
  ["depth", "Depth", num], ["ready", "Ready", num], ["inflight", "In flight", num],
  ["bytes", "Bytes", bytes], ["consumers", "Consumers", num], ["enqueued", "Enqueued", num],
  ["delivered", "Delivered", num], ["redelivered", "Redelivered", num], ["acked", "Acked", num],
  ["expired", "Expired", num], ["dead_lettered", "Dead-lettered", num],
];

export function detailFrame(address) {
  state.detail = null;
  const stream = isStreamAddress(address);
  const isQueue = address.startsWith("queue:") || stream; // it holds messages to browse
  // a topic holds nothing to browse: nothing to page through after a publish either
  state.browse = isQueue ? {
    address, starts: [""], page: null, selected: new Set(), expanded: new Set(), loading: false,
  } : null;
  const section = h("section", { id: "detail" },
    h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Destinations"), " / "),
    h("h1", {}, h("span", { class: "mono", id: "detail-address" }, address),
      h("span", { id: "detail-kind" })),
    h("div", { class: "toolbar", id: "detail-actions" },
      isQueue ? h("button", { type: "button", class: "ghost", id: "purge", onclick: purge }, "Purge")
        : null,
      h("button", { type: "button", class: "danger", id: "delete", onclick: deleteDestination },
        "Delete")),
    h("div", { class: "counters", id: "counters" }),
    h("div", { class: "charts" },
      h("div", { class: "card" }, h("h3", {}, "Depth", h("span", { class: "legend" },
        h("span", {}, h("i", { class: "l-depth" }), "messages held"))), h("div", { id: "depth-chart" })),
      h("div", { class: "card" }, h("h3", {}, "Rates", h("span", { class: "legend" },
        h("span", {}, h("i", { class: "l-enq" }), "enqueued/s"),
        h("span", {}, h("i", { class: "l-del" }), "delivered/s"))), h("div", { id: "rate-chart" }))),
    h("h2", {}, "Consumers"),
    h("div", { class: "card", id: "detail-consumers" }),
    h("div", { id: "detail-subscriptions" }),
    stream ? h("div", { id: "detail-stream" }) : null,
    publishFrame(address, {
      act, notice, after: afterChange, show: showTaken, queue: address.startsWith("queue:"),
    }),
    isQueue ? messagesFrame(stream) : null);
  if (isQueue) loadMessages();
  return section;
}

export function fillDetail(address) {
  const d = state.detail || state.destinations.find((x) => x.address === address);
  if (!d) return;
  document.getElementById("detail-kind").replaceChildren(kindChip(d));
  const listed = state.destinations.find((x) => x.address === address) || {};
  const stream = d.kind === "stream";
  const counter = (key, label, value) => h("div", { class: "counter", dataset: { counter: key } },
    h("div", { class: "label" }, label), h("div", { class: "value" }, value));
  document.getElementById("counters").replaceChildren(...COUNTERS
    .filter(([key]) => typeof d[key] === "number" && !(stream && NOT_A_STREAMS.has(key)))
    .map(([key, label, format]) => counter(key, label, format(d[key]))),
  ...(stream ? streamCounters(d).map(([key, label, value]) => counter(key, label, value)) : []),
  h("div", { class: "counter" }, h("div", { class: "label" }, "Enqueued/s"),
    h("div", { class: "value" }, rate(listed.rate_enq))),
  h("div", { class: "counter" }, h("div", { class: "label" }, "Delivered/s"),
    h("div", { class: "value" }, rate(listed.rate_del))));
  const hist = state.history.get(address);
  document.getElementById("depth-chart").replaceChildren(depthChart(hist, true));
  document.getElementById("rate-chart").replaceChildren(rateChart(hist, true));
  const consumers = d.consumers_detail || (Array.isArray(d.consumers) ? d.consumers : null) ||
    (state.detail ? [] : null);
  const box = document.getElementById("detail-consumers");
  box.replaceChildren(consumers === null ? h("p", { class: "empty" }, "Loading…")
    : consumersTable(consumers, { address: false }));
  const streamBox = document.getElementById("detail-stream");
  if (streamBox && stream) streamBox.replaceChildren(readersTable(d));
  const subs = d.subscriptions || [];
  document.getElementById("detail-subscriptions").replaceChildren(...(subs.length ? [
    h("h2", {}, "Subscriptions"),
    h("div", { class: "card" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Kind"), h("th", {}, "Selector"),
        h("th", { class: "num" }, "Depth"), h("th", { class: "num" }, "In flight"),
        h("th", { class: "num" }, "Consumers"), h("th", { class: "num" }, "Enqueued"),
        h("th", {}, "Depth, 2 min"))),
      h("tbody", {}, subs.map((s) => h("tr", {},
        h("td", {}, s.name), h("td", {}, h("span", { class: "chip" }, s.kind || "")),
        h("td", { class: "mono" }, s.selector || ""),
        h("td", { class: "num" }, num(s.depth)), h("td", { class: "num" }, num(s.inflight)),
        h("td", { class: "num" }, num(s.consumers)), h("td", { class: "num" }, num(s.enqueued)),
        h("td", { class: "chart" }, depthChart(state.history.get(subKey(address, s)))))))))] : []));
}

async function purge() {
  const address = currentView().address;
  const answer = await ask({
    title: `Purge ${address}?`,
    text: isStreamAddress(address)
      ? "Every message this stream keeps is removed for good; its offsets go on from its head."
      : "Every waiting message of this queue is removed for good; messages in flight stay.",
    okLabel: "Purge", danger: true,
  });
  if (!answer) return;
  await act("Purge", async () => {
    const result = await api("POST", `${destinationPath(address)}/purge`);
    notice(`Purged ${plural(result.purged, "message")} from ${address}.`);
    if (state.browse) state.browse.starts = [""]; // nothing is left to page through
    await loadMessages();
    await tick();
  });
}

async function deleteDestination() {
  const address = currentView().address;
  const topic = address.startsWith("topic:");
  const answer = await ask({
    title: `Delete ${address}?`,
    text: topic
      ? "The topic, its durable subscriptions and their messages are deleted; its consumers are closed."
      : `The ${isStreamAddress(address) ? "stream" : "queue"} and all its messages are deleted; ` +
        "its consumers are closed.",
    okLabel: "Delete", danger: true,
  });
  if (!answer) return;
  await act("Delete", async () => {
    const result = await api("DELETE", `${destinationPath(address)}?force=${topic}`);
    notice(`Deleted ${address} with ${plural(result.deleted, "message")}.`);
    location.hash = "#/";
  });
}
