// The chute web console: plain JavaScript over the broker's JSON admin API (/api/...).
// It polls /api/destinations every POLL_MS (with the filter box's text: the broker
// filters every destination, not only those loaded) and keeps the last SAMPLES samples
// of each destination's depth and rates in the page, for the charts. Views are picked
// by the URL's hash: #/ (destinations, destinations.js), #/destination/<address>,
// #/connections (connections.js). The broker's state (brokerstate.js) shows above every
// view. A destination's page can publish and get messages (publish.js); a stream's
// (streams.js) shows its offsets and readers, and its messages are browsed, never moved.
// A user who may manage only some destinations (the overview and the connections answer
// 403) sees those, without the state panel and the connections list, and without an
// error for what they may not see. Everything shown is built with DOM calls
// (textContent), never from HTML strings. The building blocks (DOM, formats, the API
// call, the dialog, charts) are in lib.js.
import {
  ApiError, SAMPLES, api, ask, bytes, depthChart, destinationPath, duration, enc, h,
  isDeadLetterAddress, num, plural, rate, rateChart, when,
} from "./lib.js";
import { renderState } from "./brokerstate.js";
import { connectionsFrame, consumersTable, fillConnections } from "./connections.js";
import {
  MAX_DESTINATIONS, destinationsFrame, fillDestinations, kindChip, subKey,
} from "./destinations.js";
import { publishFrame } from "./publish.js";
import { follow } from "./moves.js";
import { NOT_A_STREAMS, isStreamAddress, readersTable, streamCounters } from "./streams.js";

const POLL_MS = 2000;
const PAGE_SIZE = 50;
const MAX_PAGES = 10; // a user who sees few destinations gets sparse pages: walk this many
const FILTER_DELAY_MS = 250;
const ORIGIN_PROPERTY = "chute_original_destination";
const REASON_PROPERTY = "chute_reason";

const state = {
  destinations: [],
  truncated: false,
  history: new Map(), // key -> {depth: [], enq: [], del: [], last: {t, enqueued, delivered}}
  overview: null,
  filter: "",
  detail: null, // the open destination's document
  browse: null, // {address, starts: [after...], page, selected: Set, expanded: Set}
  connections: null,
  consumers: null,
  restricted: false, // the user may not manage every destination (the overview said 403)
  connectionsForbidden: false,
  errors: new Map(), // source -> message (the banner shows them)
};

const forbidden = (err) => err instanceof ApiError && err.status === 403;

// ---------------------------------------------------------------- banners

function showErrors() {
  const banner = document.getElementById("banner");
  const messages = [...new Set(state.errors.values())];
  banner.hidden = messages.length === 0;
  document.getElementById("banner-text").textContent = messages.join(" \u2014 ");
}

function setError(source, err) {
  if (err === null) state.errors.delete(source);
  else state.errors.set(source, err instanceof ApiError && err.code
    ? `${err.message} (${err.code})` : String(err.message || err));
  showErrors();
}

let noticeTimer = 0;
function notice(text) {
  const el = document.getElementById("notice");
  el.textContent = text;
  el.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { el.hidden = true; }, 6000);
}

// An action the operator started: its error stays on the banner until dismissed.
async function act(label, work) {
  try {
    setError("action", null);
    await work();
  } catch (err) {
    setError("action", new ApiError(err.status, err.code, `${label} failed: ${err.message}`));
  }
}

// ---------------------------------------------------------------- samples and charts

function record(key, d, now) {
  let hist = state.history.get(key);
  if (!hist) {
    hist = { depth: [], enq: [], del: [], last: null };
    state.history.set(key, hist);
  }
  const delivered = typeof d.delivered === "number" ? d.delivered : d.acked;
  let enq = d.rates && typeof d.rates.enqueued === "number" ? d.rates.enqueued : null;
  let del = d.rates && typeof d.rates.delivered === "number" ? d.rates.delivered : null;
  if ((enq === null || del === null) && hist.last) { // no rates from the API: counter deltas
    const dt = (now - hist.last.t) / 1000;
    if (dt > 0) {
      if (enq === null) enq = Math.max(0, (d.enqueued - hist.last.enqueued) / dt) || 0;
      if (del === null) del = Math.max(0, (delivered - hist.last.delivered) / dt) || 0;
    }
  }
  hist.last = { t: now, enqueued: d.enqueued, delivered };
  push(hist.depth, d.depth || 0);
  push(hist.enq, enq || 0);
  push(hist.del, del || 0);
  d.rate_enq = enq;
  d.rate_del = del;
}

function push(list, value) {
  list.push(value);
  if (list.length > SAMPLES) list.shift();
}

// ---------------------------------------------------------------- polling

async function pollDestinations() {
  const found = [];
  let after = "";
  let truncated = false;
  const filter = state.filter.trim();
  for (let pages = 1; ; pages += 1) {
    const query = new URLSearchParams({ limit: "1000" });
    if (after) query.set("after", after);
    if (filter) query.set("contains", filter);
    const page = await api("GET", `/api/destinations?${query}`);
    found.push(...(page.destinations || []));
    if (!page.next) break;
    if (found.length >= MAX_DESTINATIONS || pages >= MAX_PAGES) { truncated = true; break; }
    after = page.next;
  }
  if (filter !== state.filter.trim()) return; // the filter changed meanwhile: the next poll
  const now = Date.now();
  const seen = new Set();
  for (const d of found) {
    record(d.address, d, now);
    seen.add(d.address);
    for (const sub of d.subscriptions || []) {
      const key = subKey(d.address, sub);
      record(key, sub, now);
      seen.add(key);
    }
  }
  if (!truncated && !filter) {
    for (const key of state.history.keys()) if (!seen.has(key)) state.history.delete(key);
  }
  state.destinations = found;
  state.truncated = truncated;
}

async function pollOverview() {
  if (state.restricted) return;
  try {
    state.overview = await api("GET", "/api/overview");
  } catch (err) {
    if (!forbidden(err)) throw err;
    state.restricted = true; // the broker-wide views are not this user's: no error for them
    state.overview = null;
  }
}

async function pollView() {
  const view = currentView();
  if (view.name === "destination") {
    state.detail = await api("GET", destinationPath(view.address));
  } else if (view.name === "connections") {
    const listing = state.connectionsForbidden ? Promise.resolve({ connections: [] })
      : api("GET", "/api/connections").catch((err) => {
        if (!forbidden(err)) throw err;
        state.connectionsForbidden = true; // those of the destinations they manage only
        return { connections: [] };
      });
    const [connections, consumers] = await Promise.all([listing, api("GET", "/api/consumers")]);
    state.connections = connections.connections || [];
    state.consumers = consumers.consumers || [];
  }
}

let pollTimer = 0;
let polling = null; // the poll under way; a tick meanwhile asks for one more after it
let pollAgain = false;
async function tick() {
  if (polling) {
    pollAgain = true;
    return polling;
  }
  clearTimeout(pollTimer);
  polling = (async () => {
    do {
      pollAgain = false;
      await pollOnce();
    } while (pollAgain);
  })();
  try {
    await polling;
  } finally {
    polling = null;
    pollTimer = setTimeout(tick, POLL_MS);
  }
}

async function pollOnce() {
  const sources = { destinations: pollDestinations, overview: pollOverview, view: pollView };
  const results = await Promise.allSettled(Object.values(sources).map((f) => f()));
  Object.keys(sources).forEach((source, i) => {
    const result = results[i];
    setError(source, result.status === "rejected" ? result.reason : null);
  });
  document.getElementById("live").classList.toggle("stale", results[0].status === "rejected");
  renderOverview();
  render(false);
}

// ---------------------------------------------------------------- routing

function currentView() {
  const hash = location.hash.replace(/^#\/?/, "");
  if (hash.startsWith("destination/")) {
    return { name: "destination", address: decodeURIComponent(hash.slice("destination/".length)) };
  }
  if (hash === "connections") return { name: "connections" };
  return { name: "destinations" };
}

function openDestination(address) {
  location.hash = `#/destination/${enc(address)}`;
}

let shownView = "";
function render(viewChanged) {
  const view = currentView();
  const key = view.name === "destination" ? `destination/${view.address}` : view.name;
  if (viewChanged || key !== shownView) {
    shownView = key;
    const main = document.getElementById("main");
    main.replaceChildren();
    if (view.name === "destinations") {
      main.append(destinationsFrame(state.filter, { onFilter: filtered, onCreate: createDestination }));
    }
    else if (view.name === "destination") main.append(detailFrame(view.address));
    else main.append(connectionsFrame());
  }
  document.getElementById("tab-destinations").classList.toggle("active", view.name !== "connections");
  document.getElementById("tab-connections").classList.toggle("active", view.name === "connections");
  if (view.name === "destinations") fillDestinations(state, { open: openDestination });
  else if (view.name === "destination") fillDetail(view.address);
  else fillConnections(connectionsView(), { act, notice, tick });
}

function renderOverview() {
  const o = state.overview;
  renderState(o, document.getElementById("state"));
  const el = document.getElementById("overview");
  if (!o) { el.replaceChildren(); return; }
  const item = (label, value) => h("span", {}, `${label} `, h("b", {}, value));
  el.replaceChildren(
    item("version", o.version || "–"),
    item("up", duration(o.uptime_s)),
    item("connections", num(typeof o.connections === "number" ? o.connections
      : o.connections && o.connections.open)),
    item("destinations", num(o.destination_count)),
    ...(o.ready === false ? [h("span", {}, h("b", {}, "not ready"))] : []),
  );
}

// ---------------------------------------------------------------- destinations

let filterTimer = 0;
function filtered(text) {
  state.filter = text;
  fillDestinations(state, { open: openDestination }); // those loaded, until the broker answers
  clearTimeout(filterTimer);
  filterTimer = setTimeout(tick, FILTER_DELAY_MS);
}

async function createDestination() {
  const address = await ask({
    title: "Create a destination",
    text: "Its address: queue:NAME, topic:NAME or stream:NAME (a bare NAME is a queue).",
    input: "queue:", okLabel: "Create",
  });
  if (!address) return;
  await act("Create", async () => {
    const result = await api("POST", "/api/destinations", { address });
    notice(result.created ? `Created ${result.address}.` : `${result.address} exists already.`);
    await tick();
  });
}

// ---------------------------------------------------------------- one destination

const COUNTERS = [
  ["depth", "Depth", num], ["ready", "Ready", num], ["inflight", "In flight", num],
  ["bytes", "Bytes", bytes], ["consumers", "Consumers", num], ["enqueued", "Enqueued", num],
  ["delivered", "Delivered", num], ["redelivered", "Redelivered", num], ["acked", "Acked", num],
  ["expired", "Expired", num], ["dead_lettered", "Dead-lettered", num],
];

function detailFrame(address) {
  state.detail = null;
  state.browse = {
    address, starts: [""], page: null, selected: new Set(), expanded: new Set(), loading: false,
  };
  const stream = isStreamAddress(address);
  const isQueue = address.startsWith("queue:") || stream; // it holds messages to browse
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

function fillDetail(address) {
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

// ---------------------------------------------------------------- browsing messages

// A stream's messages are only browsed: moving, retrying or deleting one is for queues.
function messagesFrame(stream = false) {
  return h("div", { id: "messages-section" },
    h("h2", {}, "Messages"),
    h("div", { class: "toolbar" },
      h("button", { type: "button", class: "ghost", id: "refresh-messages", onclick: loadMessages },
        "Refresh"),
      stream ? null
        : h("button", { type: "button", class: "ghost", id: "move", onclick: moveMessages }, "Move to…"),
      stream ? null
        : h("button", { type: "button", id: "retry-all", hidden: true, onclick: retryAll }, "Retry all"),
      h("span", { class: "spacer" }),
      h("span", { class: "muted", id: "selection" })),
    h("div", { class: "card" }, h("div", { id: "messages" }, h("p", { class: "empty" }, "Loading…")),
      h("div", { class: "pager" },
        h("span", { id: "page-info" }),
        h("button", { type: "button", class: "ghost small", id: "prev-page", onclick: prevPage },
          "← Previous"),
        h("button", { type: "button", class: "ghost small", id: "next-page", onclick: nextPage },
          "Next →"))));
}

async function loadMessages() {
  const b = state.browse;
  if (!b) return;
  const address = b.address;
  const after = b.starts[b.starts.length - 1];
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (after !== "") query.set("after", String(after));
  try {
    const page = await api("GET", `${destinationPath(address)}/messages?${query}`);
    if (state.browse !== b) return; // the operator went elsewhere meanwhile
    b.page = page;
    const seqs = new Set((page.messages || []).map((m) => m.seq));
    for (const seq of [...b.selected]) if (!seqs.has(seq)) b.selected.delete(seq);
    setError("messages", null);
  } catch (err) {
    // A destination that is gone: the view's own poll says so once on the banner.
    setError("messages", err.status === 404 ? null : err);
  }
  fillMessages();
}

function isDeadLetterQueue(b) {
  return isDeadLetterAddress(b.address) ||
    Boolean(b.page && (b.page.messages || []).some((m) => m.properties && ORIGIN_PROPERTY in m.properties));
}

function bodyPreview(m) {
  if (m.body_encoding === "base64") return `binary, ${bytes(m.size)}`;
  const text = String(m.body || "").replace(/\s+/g, " ");
  return text.length > 120 ? `${text.slice(0, 120)}…` : text;
}

function messageDetail(m) {
  const fields = [
    ["id", m.id], ["kind", m.kind], ["type", m.type], ["correlation_id", m.correlation_id],
    ["reply_to", m.reply_to], ["expiration", m.expiration ? when(m.expiration) : null],
    ["redelivered", m.redelivered ? "yes" : null], ["size", bytes(m.size)],
  ];
  const props = Object.entries(m.properties || {});
  return h("div", {},
    h("dl", { class: "props" },
      fields.filter(([, v]) => v !== null && v !== undefined && v !== "")
        .map(([k, v]) => [h("dt", {}, k), h("dd", { class: "mono" }, String(v))]),
      props.map(([k, v]) => [h("dt", {}, k), h("dd", { class: "mono" }, JSON.stringify(v))])),
    h("pre", { class: "body" }, m.body_encoding === "base64"
      ? `(binary, base64)\n${m.body}` : String(m.body || "")));
}

function fillMessages() {
  const b = state.browse;
  const box = document.getElementById("messages");
  if (!b || !box) return;
  const stream = isStreamAddress(b.address);
  const dlq = !stream && isDeadLetterQueue(b);
  const retryAllButton = document.getElementById("retry-all");
  if (retryAllButton) retryAllButton.hidden = !dlq;
  const messages = (b.page && b.page.messages) || [];
  document.getElementById("selection").textContent = b.selected.size
    ? `${plural(b.selected.size, "message")} selected` : "";
  document.getElementById("prev-page").disabled = b.starts.length <= 1;
  document.getElementById("next-page").disabled = !b.page || b.page.done !== false || !messages.length;
  document.getElementById("page-info").textContent = messages.length
    ? `page ${b.starts.length}: ${stream ? "offset" : "seq"} ${num(messages[0].seq)}–` +
      `${num(messages[messages.length - 1].seq)}`
    : "";
  if (!b.page) return;
  if (!messages.length) {
    box.replaceChildren(h("p", { class: "empty" }, b.starts.length > 1
      ? "No more messages." : stream ? "No messages kept." : "No messages waiting."));
    return;
  }
  const rows = [];
  for (const m of messages) {
    const props = m.properties || {};
    const open = b.expanded.has(m.seq);
    const toggle = () => {
      if (b.expanded.has(m.seq)) b.expanded.delete(m.seq); else b.expanded.add(m.seq);
      fillMessages();
    };
    const stop = (event) => event.stopPropagation();
    rows.push(h("tr", { class: `clickable${open ? " expanded" : ""}`, dataset: { seq: m.seq }, onclick: toggle },
      h("td", { onclick: stop }, stream ? null : h("input", {
        type: "checkbox", "aria-label": `Select message ${m.seq}`, checked: b.selected.has(m.seq),
        onchange: (event) => {
          if (event.target.checked) b.selected.add(m.seq); else b.selected.delete(m.seq);
          fillMessages();
        },
      })),
      h("td", { class: "num" }, num(m.seq)),
      h("td", {}, when(m.timestamp)),
      h("td", { class: "num" }, num(m.priority)),
      stream ? null : h("td", { class: "num" }, num(m.delivery_count)),
      dlq ? h("td", {}, props[ORIGIN_PROPERTY] || "") : null,
      dlq ? h("td", {}, props[REASON_PROPERTY] || "") : null,
      h("td", { class: "body" }, bodyPreview(m)),
      h("td", { class: "actions", onclick: stop },
        dlq && props[ORIGIN_PROPERTY] ? h("button", {
          type: "button", class: "small retry", onclick: () => retry([m.seq]),
        }, "Retry") : null,
        stream ? null : h("button", {
          type: "button", class: "small danger", onclick: () => deleteMessage(m.seq),
        }, "Delete"))));
    if (open) {
      rows.push(h("tr", { class: "detail" },
        h("td", { colspan: dlq ? 9 : stream ? 6 : 7 }, messageDetail(m))));
    }
  }
  box.replaceChildren(h("table", { id: "message-table" },
    h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", { class: "num" }, stream ? "Offset" : "Seq"),
      h("th", {}, "Time"), h("th", { class: "num" }, "Priority"),
      stream ? null : h("th", { class: "num" }, "Deliveries"),
      dlq ? h("th", {}, "Original destination") : null, dlq ? h("th", {}, "Reason") : null,
      h("th", {}, "Body"), h("th", {}, ""))),
    h("tbody", {}, rows)));
}

function nextPage() {
  const b = state.browse;
  const messages = (b && b.page && b.page.messages) || [];
  if (!messages.length) return;
  b.starts.push(messages[messages.length - 1].seq);
  b.expanded.clear();
  loadMessages();
}

function prevPage() {
  const b = state.browse;
  if (!b || b.starts.length <= 1) return;
  b.starts.pop();
  b.expanded.clear();
  loadMessages();
}

async function afterChange() {
  await loadMessages();
  await tick();
}

// What a get took, each message in full (they may be gone from the queue now).
function showTaken(messages) {
  const box = document.getElementById("got");
  if (!box) return;
  box.replaceChildren(...messages.map((m) => h("div", { class: "got-message", dataset: { seq: m.seq } },
    h("div", { class: "muted" }, `seq ${num(m.seq)}, delivery ${num(m.delivery_count)}` +
      `${m.redelivered ? ", redelivered" : ""}`),
    messageDetail(m))));
}

function summary(to) {
  return Object.entries(to || {}).map(([dest, n]) => `${dest} (${num(n)})`).join(", ");
}

async function retry(seqs) {
  const address = state.browse.address;
  await act("Retry", async () => {
    const result = await follow(await api("POST", `${destinationPath(address)}/retry`, { seqs }));
    notice(`Retried ${plural(result.moved, "message")}${result.moved ? ` to ${summary(result.to)}` : ""}.`);
    for (const seq of seqs) state.browse.selected.delete(seq);
    await afterChange();
  });
}

async function retryAll() {
  const b = state.browse;
  const selected = [...b.selected];
  const answer = await ask({
    title: selected.length ? "Retry the selected messages?" : "Retry every dead letter?",
    text: selected.length
      ? `${plural(selected.length, "message")} go back to the destination each came from.`
      : `Every message waiting in ${b.address} goes back to the destination it came from.`,
    okLabel: "Retry",
  });
  if (!answer) return;
  await act("Retry", async () => {
    const result = await follow(await api("POST", `${destinationPath(b.address)}/retry`,
      selected.length ? { seqs: selected } : {}));
    notice(`Retried ${plural(result.moved, "message")}${result.moved ? ` to ${summary(result.to)}` : ""}.`);
    b.selected.clear();
    b.starts = [""];
    await afterChange();
  });
}

async function moveMessages() {
  const b = state.browse;
  const selected = [...b.selected];
  const target = await ask({
    title: "Move messages",
    text: selected.length
      ? `Move ${plural(selected.length, "selected message")} of ${b.address} to this existing queue or topic:`
      : `Move every waiting message of ${b.address} to this existing queue or topic:`,
    input: "queue:", okLabel: "Move",
  });
  if (!target) return;
  if (!/^(queue|topic):./.test(target)) {
    setError("action", new ApiError(0, "invalid-address",
      `Move: "${target}" is not an address: write queue:name or topic:name.`));
    return;
  }
  await act("Move", async () => {
    const result = await follow(await api("POST", `${destinationPath(b.address)}/move`,
      selected.length ? { to: target, seqs: selected } : { to: target }));
    notice(`Moved ${plural(result.moved, "message")} to ${target}.`);
    b.selected.clear();
    await afterChange();
  });
}

async function deleteMessage(seq) {
  const address = state.browse.address;
  const answer = await ask({
    title: `Delete message ${seq}?`, text: `It is removed from ${address} for good.`,
    okLabel: "Delete", danger: true,
  });
  if (!answer) return;
  await act("Delete message", async () => {
    await api("DELETE", `${destinationPath(address)}/messages/${enc(seq)}`);
    notice(`Deleted message ${seq} from ${address}.`);
    state.browse.selected.delete(seq);
    await afterChange();
  });
}

// ---------------------------------------------------------------- connections, consumers

const connectionsView = () => ({
  connections: state.connections, consumers: state.consumers, forbidden: state.connectionsForbidden,
});

// ---------------------------------------------------------------- start

function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}

function start() {
  let theme = null;
  try { theme = localStorage.getItem("chute-theme"); } catch (err) { theme = null; }
  applyTheme(theme);
  document.getElementById("theme").addEventListener("click", () => {
    const dark = getComputedStyle(document.documentElement).colorScheme.includes("dark");
    const next = dark ? "light" : "dark";
    applyTheme(next);
    try { localStorage.setItem("chute-theme", next); } catch (err) { /* private mode */ }
  });
  document.getElementById("banner-close").addEventListener("click", () => {
    state.errors.clear();
    showErrors();
  });
  window.addEventListener("hashchange", () => {
    state.detail = null;
    render(true);
    tick();
  });
  render(true);
  tick();
}

start();
