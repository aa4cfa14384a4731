// The destinations view: every queue, stream and topic the user may manage (each topic's
// subscriptions under it) with counters, rates and small charts of the last samples.
// The filter box's text goes to the broker with every poll (poll.js): the broker keeps
// the destinations whose address holds it, whichever they are; the rows shown meanwhile
// are those loaded that hold it.
import {
  depthChart, h, isDeadLetterAddress, num, rate, rateChart,
} from "./lib.js";

export const MAX_DESTINATIONS = 2000;

export const subKey = (topic, sub) => `${topic}\u0000${sub.name}`;

// `onFilter(text)` as the filter changes, `onCreate()` for the Create button.
export function destinationsFrame(filterText, { onFilter, onCreate }) {
  const filter = h("input", {
    type: "search", id: "filter", placeholder: "Filter by address", value: filterText,
    "aria-label": "Filter destinations by address",
    oninput: (event) => onFilter(event.target.value),
  });
  return h("section", {},
    h("h1", {}, "Destinations"),
    h("div", { class: "toolbar" }, filter,
      h("button", { type: "button", class: "ghost", id: "create", onclick: onCreate }, "Create…"),
      h("span", { class: "spacer" }),
      h("span", { class: "legend" },
        h("span", {}, h("i", { class: "l-depth" }), "depth"),
        h("span", {}, h("i", { class: "l-enq" }), "enqueued/s"),
        h("span", {}, h("i", { class: "l-del" }), "delivered/s"))),
    h("div", { class: "card" },
      h("table", { id: "destinations" },
        h("thead", {}, h("tr", {},
          h("th", {}, "Address"), h("th", {}, "Kind"),
          h("th", { class: "num" }, "Depth"), h("th", { class: "num" }, "Ready"),
          h("th", { class: "num" }, "In flight"), h("th", { class: "num" }, "Consumers"),
          h("th", { class: "num" }, "Enqueued/s"), h("th", { class: "num" }, "Delivered/s"),
          h("th", {}, "Depth, 2 min"), h("th", {}, "Rates, 2 min"))),
        h("tbody", {}))),
    h("p", { class: "muted", id: "truncated", hidden: true },
      `Showing the first ${num(MAX_DESTINATIONS)} destinations: filter to find others.`));
}

export function kindChip(d) {
  if (d.kind === "queue" && isDeadLetterAddress(d.address)) {
    return h("span", { class: "chip dlq" }, "dead letters");
  }
  return h("span", { class: "chip" }, d.kind || "");
}

function destinationRow(d, hist, key, { sub = false, onclick = null } = {}) {
  return h("tr", {
    class: `${sub ? "sub " : ""}${onclick ? "clickable" : ""}`,
    dataset: { address: sub ? `${key.split("\u0000")[0]}#${d.name}` : d.address },
    onclick,
  },
  h("td", { class: "address" }, sub ? d.name : d.address),
  h("td", {}, sub ? h("span", { class: "chip" }, d.kind || "subscription") : kindChip(d)),
  h("td", { class: "num depth" }, num(d.depth)),
  h("td", { class: "num ready" }, num(d.ready)),
  h("td", { class: "num inflight" }, num(d.inflight)),
  h("td", { class: "num consumers" }, num(d.consumers)),
  h("td", { class: "num rate-enq" }, rate(d.rate_enq)),
  h("td", { class: "num rate-del" }, rate(d.rate_del)),
  h("td", { class: "chart" }, depthChart(hist)),
  h("td", { class: "chart" }, rateChart(hist)));
}

// `state`: the console's (destinations, filter, truncated, history); `open(address)`.
export function fillDestinations(state, { open }) {
  const body = document.querySelector("#destinations tbody");
  if (!body) return;
  const needle = state.filter.trim().toLowerCase();
  const rows = [];
  for (const d of state.destinations) {
    if (needle && !d.address.toLowerCase().includes(needle)) continue;
    rows.push(destinationRow(d, state.history.get(d.address), d.address,
      { onclick: () => open(d.address) }));
    for (const sub of d.subscriptions || []) {
      const key = subKey(d.address, sub);
      const onclick = sub.address ? () => open(sub.address) : null;
      rows.push(destinationRow(sub, state.history.get(key), key, { sub: true, onclick }));
    }
  }
  if (!rows.length) {
    rows.push(h("tr", {}, h("td", { colspan: 10, class: "empty" },
      state.destinations.length ? "No destination matches the filter." : "No destinations yet.")));
  }
  body.replaceChildren(...rows);
  document.getElementById("truncated").hidden = !state.truncated;
}
