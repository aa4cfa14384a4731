// The connections view: each client connection (with a Close button) and every consumer.
// A user who may manage only some destinations may not list the connections (403): for
// them the view says so and lists the consumers of the destinations they manage.
import { api, ask, duration, enc, h, num } from "./lib.js";

export function connectionsFrame() {
  return h("section", {},
    h("h1", {}, "Connections"),
    h("div", { class: "card", id: "connections" }, h("p", { class: "empty" }, "Loading…")),
    h("h2", {}, "Consumers"),
    h("div", { class: "card", id: "consumers" }, h("p", { class: "empty" }, "Loading…")));
}

export function consumersTable(consumers, { address = true } = {}) {
  if (!consumers.length) return h("p", { class: "empty" }, "No consumers.");
  return h("table", {},
    h("thead", {}, h("tr", {},
      h("th", {}, "Connection"), address ? h("th", {}, "Address") : null,
      h("th", {}, "Subscription"), h("th", {}, "Ack mode"), h("th", {}, "Selector"),
      h("th", { class: "num" }, "Prefetch"), h("th", { class: "num" }, "Unacked"),
      h("th", { class: "num" }, "Delivered"))),
    h("tbody", {}, consumers.map((c) => h("tr", {},
      h("td", { class: "mono" }, c.connection ?? ""),
      address ? h("td", {}, h("a", { href: `#/destination/${enc(c.address || "")}` }, c.address || ""))
        : null,
      h("td", {}, c.subscription || ""), h("td", {}, c.ack_mode || ""),
      h("td", { class: "mono" }, c.selector || ""),
      h("td", { class: "num" }, num(c.prefetch)), h("td", { class: "num" }, num(c.unacked)),
      h("td", { class: "num" }, num(c.delivered))))));
}

// `view`: {connections (null: not loaded yet), consumers, forbidden}; `ops`: the console's
// {act, notice, tick}, for the Close button.
export function fillConnections(view, ops) {
  const box = document.getElementById("connections");
  if (!box || view.connections === null) return;
  const now = Date.now();
  const consumers = document.getElementById("consumers");
  if (view.forbidden) {
    box.replaceChildren(h("p", { class: "empty", id: "connections-forbidden" },
      "Listing connections needs the manage permission on every destination; " +
      "below are the consumers of the destinations you manage."));
    consumers.replaceChildren(consumersTable(view.consumers || []));
    return;
  }
  box.replaceChildren(view.connections.length ? h("table", { id: "connection-table" },
    h("thead", {}, h("tr", {},
      h("th", {}, "ID"), h("th", {}, "User"), h("th", {}, "Protocol"), h("th", {}, "Peer"),
      h("th", {}, "Client ID"), h("th", { class: "num" }, "Connected for"),
      h("th", { class: "num" }, "Sessions"), h("th", { class: "num" }, "Consumers"),
      h("th", { class: "num" }, "Unacked"), h("th", {}, ""))),
    h("tbody", {}, view.connections.map((c) => h("tr", { dataset: { connection: c.id } },
      h("td", { class: "mono" }, c.id), h("td", {}, c.user || h("span", { class: "muted" }, "anonymous")),
      h("td", {}, c.protocol || ""), h("td", { class: "mono" }, c.peer || ""),
      h("td", {}, c.client_id || ""),
      h("td", { class: "num" }, c.connected_at ? duration((now - c.connected_at) / 1000) : "–"),
      h("td", { class: "num" }, num(c.sessions)), h("td", { class: "num" }, num(c.consumers)),
      h("td", { class: "num" }, num(c.unacked)),
      h("td", { class: "actions" }, h("button", {
        type: "button", class: "small danger", onclick: () => closeConnection(c, ops),
      }, "Close"))))))
    : h("p", { class: "empty" }, "No connections."));
  consumers.replaceChildren(consumersTable(view.consumers || []));
}

async function closeConnection(c, { act, notice, tick }) {
  const answer = await ask({
    title: `Close connection ${c.id}?`,
    text: `${c.user || "anonymous"} over ${c.protocol || "?"} from ${c.peer || "?"}: ` +
      "its unacknowledged messages are redelivered to other consumers.",
    okLabel: "Close connection", danger: true,
  });
  if (!answer) return;
  await act("Close connection", async () => {
    await api("DELETE", `/api/connections/${enc(c.id)}`);
    notice(`Closed connection ${c.id}.`);
    await tick();
  });
}
