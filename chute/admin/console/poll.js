// Polling the broker: every POLL_MS (and at once when an action asks, with tick()) the
// console gets /api/destinations (with the filter box's text: the broker filters every
// destination, not only those loaded), /api/overview (and /api/cluster on a node of a
// cluster) and what the open view shows, then redraws the page. It keeps the last SAMPLES
// samples of each destination's depth and rates, for the charts. A user who may not see the overview or the connections (403)
// gets no error for them: the page leaves them out.
import { SAMPLES, api, destinationPath } from "./lib.js";
import { MAX_DESTINATIONS, subKey } from "./destinations.js";
import { currentView, forbidden, setError, state } from "./page.js";

const POLL_MS = 2000;
const MAX_PAGES = 10; // a user who sees few destinations gets sparse pages: walk this many

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

// The cluster, on a node of one (the overview says so; the broker asks the nodes, and a
// node that does not answer within its deadline comes back down).
async function pollCluster() {
  state.cluster = state.overview && state.overview.cluster
    ? await api("GET", "/api/cluster") : null;
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

let redraw = () => {};
// `draw()` redraws the page after each poll (console.js says how).
export function onPolled(draw) {
  redraw = draw;
}

let pollTimer = 0;
let polling = null; // the poll under way; a tick meanwhile asks for one more after it
let pollAgain = false;
export async function tick() {
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
  const sources = {
    destinations: pollDestinations,
    overview: async () => { await pollOverview(); await pollCluster(); },
    view: pollView,
  };
  const results = await Promise.allSettled(Object.values(sources).map((f) => f()));
  Object.keys(sources).forEach((source, i) => {
    const result = results[i];
    setError(source, result.status === "rejected" ? result.reason : null);
  });
  document.getElementById("live").classList.toggle("stale", results[0].status === "rejected");
  redraw();
}
