// Building DOM nodes. Text always goes in through textContent / createTextNode, never through
// HTML parsing, so agent and user text is displayed as text whatever it contains.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";

export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  return append(el, children);
}

// Designed states: every screen shows one of these instead of an empty box.
export function emptyState(title, hint, ...actions) {
  return h("div", { class: "state state-empty", role: "status" },
    h("div", { class: "state-title" }, title),
    hint ? h("p", { class: "state-hint" }, hint) : null,
    actions.length ? h("div", { class: "state-actions" }, actions) : null);
}

export function loadingState(what) {
  return h("div", { class: "state state-loading", role: "status" },
    h("span", { class: "spinner", "aria-hidden": "true" }),
    h("span", {}, `Loading ${what}…`));
}

export function errorState(title, error, retry) {
  return h("div", { class: "state state-error", role: "alert" },
    h("div", { class: "state-title" }, title),
    h("p", { class: "state-hint" }, describeError(error)),
    retry ? h("div", { class: "state-actions" },
      h("button", { class: "btn", type: "button", onclick: retry }, "Try again")) : null);
}

// A screen's status line, hidden until `say(text, bad)` shows text in it (an error when `bad`).
export function statusLine(attrs) {
  const line = h("p", { class: "form-notice", role: "status", ...attrs });
  line.hidden = true;
  const say = (text, bad) => {
    line.textContent = text;
    line.className = bad ? "form-error" : "form-notice";
    line.hidden = false;
  };
  return [line, say];
}

// A button's click handler: runs `work`, says `what` (or why it failed), then `reload()`s.
export const actionOf = (say, reload) => (what, work) => async () => {
  try {
    await work();
    say(what);
  } catch (error) {
    say(`${what.replace(/\.$/, "")} failed: ${describeError(error)}`, true);
  }
  reload();
};

// Loads a list into `target`: its loading state, then `show(items)` of what `fetch` gives (or
// `empty()` when none), or the error with a retry; nothing more once `alive()` is false.
export function listLoader(target, { what, fetch, empty, show, failed, alive }) {
  const load = async () => {
    replace(target, loadingState(what));
    try {
      const items = await fetch();
      if (alive()) replace(target, items.length ? show(items) : empty());
    } catch (error) {
      if (alive()) replace(target, errorState(failed, error, load));
    }
  };
  return load;
}

export function describeError(error) {
  if (!error) return "Unknown error";
  if (error.status) return `${error.status}: ${error.message}`;
  return error.message || String(error);
}

export function badge(text, kind) {
  return h("span", { class: `badge badge-${kind || "plain"}` }, text);
}

export function formatTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export function relativeTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  if (s < 45) return "just now";
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return d.toLocaleDateString();
}

// The part of an id that tells it apart. A UUIDv7 begins with its creation time, so the ids of
// tasks started within a minute share their first characters; their random end differs.
// Short ids (a caller's own task ids) are shown whole.
export function shortId(id) {
  const text = id ? String(id) : "";
  return text.length > 12 ? `…${text.slice(-8)}` : text;
}

// A task named for people: the telling end of its id, with its title or first question (the
// first line, clipped) when known.
export function taskName(taskId, question) {
  const name = `Task ${shortId(taskId)}`;
  const line = String(question || "").split("\n").find((l) => l.trim()) || "";
  if (!line) return name;
  return `${name} “${line.length > 80 ? `${line.slice(0, 80)}…` : line}”`;
}

export function pretty(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}
