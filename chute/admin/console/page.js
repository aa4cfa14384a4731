// The console's page-wide state and what it tells the operator: the state the views draw
// from (kept between polls), the banner of errors (one a source, until it clears or the
// operator dismisses it), the passing notice of what an action did, and which view the
// URL's hash picks.
import { ApiError, enc } from "./lib.js";

export const state = {
  destinations: [],
  truncated: false,
  history: new Map(), // key -> {depth: [], enq: [], del: [], last: {t, enqueued, delivered}}
  overview: null,
  filter: "",
  detail: null, // the open destination's document
  browse: null, // {address, starts: [after...], page, selected: Set, expanded: Set}
  connections: null,
  cluster: null, // /api/cluster's document on a node of a cluster
  consumers: null,
  restricted: false, // the user may not manage every destination (the overview said 403)
  connectionsForbidden: false,
  errors: new Map(), // source -> message (the banner shows them)
};

export const forbidden = (err) => err instanceof ApiError && err.status === 403;

// ---------------------------------------------------------------- banners

export function showErrors() {
  const banner = document.getElementById("banner");
  const messages = [...new Set(state.errors.values())];
  banner.hidden = messages.length === 0;
  document.getElementById("banner-text").textContent = messages.join(" \u2014 ");
}

export function setError(source, err) {
  if (err === null) state.errors.delete(source);
  else state.errors.set(source, err instanceof ApiError && err.code
    ? `${err.message} (${err.code})` : String(err.message || err));
  showErrors();
}

let noticeTimer = 0;
export function notice(text) {
  const el = document.getElementById("notice");
  el.textContent = text;
  el.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { el.hidden = true; }, 6000);
}

// An action the operator started: its error stays on the banner until dismissed.
export async function act(label, work) {
  try {
    setError("action", null);
    await work();
  } catch (err) {
    setError("action", new ApiError(err.status, err.code, `${label} failed: ${err.message}`));
  }
}

// ---------------------------------------------------------------- routing

export function currentView() {
  const hash = location.hash.replace(/^#\/?/, "");
  if (hash.startsWith("destination/")) {
    return { name: "destination", address: decodeURIComponent(hash.slice("destination/".length)) };
  }
  if (hash === "connections") return { name: "connections" };
  if (hash === "cluster") return { name: "cluster" };
  return { name: "destinations" };
}

export function openDestination(address) {
  location.hash = `#/destination/${enc(address)}`;
}
