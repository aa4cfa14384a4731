// The chute web console: plain JavaScript over the broker's JSON admin API (/api/...).
// This module starts it and draws the view the URL's hash picks: #/ (destinations,
// destinations.js), #/destination/<address> (destination.js; a queue's or stream's
// messages: messages.js), #/connections (connections.js), #/cluster on a node of a cluster
// (cluster.js: its tab shows only there), with the broker's state
// (brokerstate.js) and the header's overview above every view. The page's shared state,
// banner and notices are in page.js; poll.js polls the broker every 2 seconds and keeps
// the samples the charts draw, then this module redraws. A destination's page can
// publish and get messages (publish.js); a stream's (streams.js) shows its offsets and
// readers, and its messages are browsed, never moved. A user who may manage only some
// destinations (the overview and the connections answer 403) sees those, without the
// state panel and the connections list, and without an error for what they may not
// see. Everything shown is built with DOM calls (textContent), never from HTML
// strings. The building blocks (DOM, formats, the API call, the dialog, charts) are in
// lib.js.
import { api, ask, duration, h, num } from "./lib.js";
import { renderState } from "./brokerstate.js";
import { clusterFrame, fillCluster } from "./cluster.js";
import { connectionsFrame, fillConnections } from "./connections.js";
import { detailFrame, fillDetail } from "./destination.js";
import { destinationsFrame, fillDestinations } from "./destinations.js";
import { act, currentView, notice, openDestination, showErrors, state } from "./page.js";
import { onPolled, tick } from "./poll.js";

const FILTER_DELAY_MS = 250;

// ---------------------------------------------------------------- routing

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
    else if (view.name === "cluster") main.append(clusterFrame());
    else main.append(connectionsFrame());
  }
  const tabs = {
    destinations: ["destinations", "destination"], connections: ["connections"], cluster: ["cluster"],
  };
  for (const [tab, views] of Object.entries(tabs)) {
    document.getElementById(`tab-${tab}`).classList.toggle("active", views.includes(view.name));
  }
  document.getElementById("tab-cluster").hidden = !state.cluster;
  if (view.name === "destinations") fillDestinations(state, { open: openDestination });
  else if (view.name === "destination") fillDetail(view.address);
  else if (view.name === "cluster") fillCluster(state.cluster, state.destinations);
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
  onPolled(() => {
    renderOverview();
    render(false);
  });
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
