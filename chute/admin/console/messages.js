// A queue's or stream's messages on its page: a table of PAGE_SIZE messages a page (one
// opens to show it in full), paged forward and back by sequence number (a stream's by
// offset). A queue's can be selected and moved to another destination, retried (a dead-
// letter queue's, back where each came from: moves.js follows the job) or deleted one
// by one; a stream's are only browsed.
import {
  ApiError, api, ask, bytes, destinationPath, enc, h, isDeadLetterAddress, num, plural, when,
} from "./lib.js";
import { follow } from "./moves.js";
import { act, notice, setError, state } from "./page.js";
import { tick } from "./poll.js";
import { isStreamAddress } from "./streams.js";

const PAGE_SIZE = 50;
const ORIGIN_PROPERTY = "chute_original_destination";
const REASON_PROPERTY = "chute_reason";

// A stream's messages are only browsed: moving, retrying or deleting one is for queues.
export function messagesFrame(stream = false) {
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

export async function loadMessages() {
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

// After an action that changed the messages: this page of them and the counters again.
export async function afterChange() {
  await loadMessages();
  await tick();
}

// What a get took, each message in full (they may be gone from the queue now).
export function showTaken(messages) {
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
