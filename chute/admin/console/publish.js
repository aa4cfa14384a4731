// Publishing a message to a destination and getting messages from a queue, from its page,
// as RabbitMQ's console does: POST /api/destinations/<address>/publish and .../get.
// A get takes messages as a consumer would: they leave the queue, or with "Requeue"
// go back to it marked redelivered (browsing, below, looks without changing anything).
import { api, destinationPath, h, plural } from "./lib.js";

// Properties as the form takes them: one name=value a line; true/false and numbers keep
// their type, anything else is a string.
export function parseProperties(text) {
  const properties = {};
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line) continue;
    const at = line.indexOf("=");
    if (at <= 0) throw new Error(`"${line}" is not name=value`);
    const name = line.slice(0, at).trim();
    const value = line.slice(at + 1).trim();
    if (value === "true" || value === "false") properties[name] = value === "true";
    else if (/^-?\d+$/.test(value) && Number.isSafeInteger(Number(value))) properties[name] = Number(value);
    else if (/^-?\d+\.\d+$/.test(value)) properties[name] = Number(value);
    else properties[name] = value;
  }
  return properties;
}

const field = (label, control) => h("label", { class: "field" }, h("span", {}, label), control);

// The two cards; `act(label, work)` runs an action and reports its error, `notice(text)`
// says what it did, `after()` refreshes the page, `show(messages)` draws what a get took.
export function publishFrame(address, { act, notice, after, show, queue }) {
  const body = h("textarea", { id: "publish-body", rows: 4, spellcheck: "false",
    placeholder: "The body (text; UTF-8)" });
  const contentType = h("input", { type: "text", id: "publish-content-type",
    placeholder: "e.g. application/json", autocomplete: "off" });
  const properties = h("textarea", { id: "publish-properties", rows: 2, spellcheck: "false",
    placeholder: "name=value, one a line" });
  const priority = h("input", { type: "number", id: "publish-priority", min: 0, max: 9, value: 4 });
  const persistent = h("input", { type: "checkbox", id: "publish-persistent", checked: true });
  const publish = async () => {
    await act("Publish", async () => {
      const message = {
        body: body.value,
        properties: parseProperties(properties.value),
        priority: Number(priority.value || 4),
        persistent: persistent.checked,
      };
      if (contentType.value.trim()) message.content_type = contentType.value.trim();
      await api("POST", `${destinationPath(address)}/publish`, message);
      notice(`Published a message to ${address}.`);
      await after();
    });
  };
  const count = h("input", { type: "number", id: "get-count", min: 1, max: 100, value: 1 });
  const mode = h("select", { id: "get-mode" },
    h("option", { value: "remove" }, "Remove: acknowledge them"),
    h("option", { value: "requeue" }, "Requeue: give them back, redelivered"));
  const get = async () => {
    await act("Get messages", async () => {
      const requeue = mode.value === "requeue";
      const result = await api("POST", `${destinationPath(address)}/get`,
        { count: Number(count.value || 1), requeue });
      const messages = result.messages || [];
      notice(messages.length ? `Got ${plural(messages.length, "message")} from ${address}` +
        `${requeue ? ", given back" : ", removed"}.` : `No message waiting in ${address}.`);
      show(messages);
      await after();
    });
  };
  return h("div", { class: "publish-get" },
    h("details", { class: "card", id: "publish" },
      h("summary", {}, "Publish message"),
      h("div", { class: "form" },
        field("Body", body),
        field("Content type", contentType),
        field("Properties", properties),
        h("div", { class: "row" }, field("Priority", priority),
          h("label", { class: "check" }, persistent, " persistent")),
        h("button", { type: "button", id: "publish-send", onclick: publish }, "Publish"))),
    queue ? h("details", { class: "card", id: "get" },
      h("summary", {}, "Get messages"),
      h("div", { class: "form" },
        h("div", { class: "row" }, field("Messages", count), field("Then", mode)),
        h("button", { type: "button", id: "get-send", onclick: get }, "Get messages"),
        h("div", { id: "got" }))) : null);
}
