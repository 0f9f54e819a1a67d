// The one place that talks to the MAIL server. Every call carries the key in the
// Authorization header; nothing here puts it in a URL, and nothing logs it.

import { readEventStream } from "./sse.js";

const KEY_SLOT = "mail-console-key";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export const session = {
  get key() {
    return sessionStorage.getItem(KEY_SLOT);
  },
  set key(value) {
    if (value) sessionStorage.setItem(KEY_SLOT, value);
    else sessionStorage.removeItem(KEY_SLOT);
  },
};

// The API lives at the origin root; the console is served under <root>/ui/.
const ROOT = new URL("..", document.baseURI).pathname.replace(/\/$/, "");

function headers(extra) {
  const out = { Accept: "application/json", ...extra };
  const key = session.key;
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

async function failure(response) {
  let detail = response.statusText || "request failed";
  try {
    const body = await response.json();
    if (body && body.detail !== undefined) {
      detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    }
  } catch {
    // not JSON
  }
  return new ApiError(response.status, detail);
}

async function send(method, path, body, options = {}) {
  let response;
  try {
    response = await fetch(ROOT + path, {
      method,
      headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}),
      body: body !== undefined ? JSON.stringify(body) : undefined,
      cache: "no-store",
      credentials: "omit",
      signal: options.signal,
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "The server cannot be reached. Is `mail server` running?");
  }
  if (!response.ok) throw await failure(response);
  return response;
}

export async function request(method, path, body, options = {}) {
  return (await send(method, path, body, options)).json();
}

// One page of a paged listing (GET /tasks, GET /tasks/all): {body, next} where `next` is the
// X-Next-Cursor of the following page (null on the last one).
async function page(path, cursor, limit = 100) {
  const query = new URLSearchParams({ limit: String(limit) });
  if (cursor) query.set("cursor", cursor);
  const response = await send("GET", `${path}?${query}`);
  return { body: await response.json(), next: response.headers.get("X-Next-Cursor") };
}

export const api = {
  root: () => request("GET", "/"),
  health: () => request("GET", "/health"),
  whoami: () => request("GET", "/whoami"),
  swarm: () => request("GET", "/swarm"),
  tasks: () => request("GET", "/tasks"),
  tasksPage: (cursor) => page("/tasks", cursor),
  allTasksPage: (cursor) => page("/tasks/all", cursor),
  // Another caller's task, whole (admins): GET /tasks/all?task_id=…
  anyTask: (taskId) => request("GET", `/tasks/all?task_id=${encodeURIComponent(taskId)}`),
  task: (taskId) => request("GET", `/task?task_id=${encodeURIComponent(taskId)}`),
  publicSwarms: () => request("GET", "/swarms"),
  registry: () => request("GET", "/swarms/registry"),
  registerSwarm: (entry) => request("POST", "/swarms", entry),
  removeSwarm: (name) => request("DELETE", `/swarms/${encodeURIComponent(name)}`),
  setHealth: (status) => request("POST", "/health", { status }),
  threads: () => request("GET", "/threads"),
  thread: (threadId) => request("GET", `/threads/${encodeURIComponent(threadId)}`),
  attachment: (attachmentId) => downloadAttachment(attachmentId),
  // POST /message answered at once (a background message: 202 with the task id).
  message: (body) => request("POST", "/message", body),

  // POST /message with stream: true. onEvent gets {event, id, data}; return false to stop.
  // onOpen (optional) runs once the server accepted the request, before the first event.
  async streamMessage(body, onEvent, signal, onOpen) {
    return openStream("POST", "/message", { ...body, stream: true }, onEvent, signal, {}, onOpen);
  },

  // Attach to a task's stream from where we left off: GET /task/events?task_id=…&after=N
  // replays the stored events after id N, then the live ones, then a closing task_complete
  // (or task_error) without an id. `after` is also sent as Last-Event-ID (the query wins).
  async resubscribe(taskId, afterId, onEvent, signal) {
    const query = new URLSearchParams({ task_id: taskId });
    if (afterId) query.set("after", String(afterId));
    const extra = afterId ? { "Last-Event-ID": String(afterId) } : {};
    return openStream("GET", `/task/events?${query}`, undefined, onEvent, signal, extra);
  },
};

async function openStream(method, path, body, onEvent, signal, extraHeaders = {}, onOpen = null) {
  let response;
  try {
    response = await fetch(ROOT + path, {
      method,
      headers: headers({
        Accept: "text/event-stream",
        ...(body !== undefined ? { "Content-Type": "application/json" } : {}),
        ...extraHeaders,
      }),
      body: body !== undefined ? JSON.stringify(body) : undefined,
      cache: "no-store",
      credentials: "omit",
      signal,
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "The server cannot be reached. Is `mail server` running?");
  }
  if (!response.ok) throw await failure(response);
  if (onOpen) onOpen();
  await readEventStream(response, onEvent, signal);
}

// GET /attachments/{id}: the bytes as a Blob, with the file name from Content-Disposition.
// The key goes in the Authorization header like every other call, so the file cannot be a
// plain link; the caller turns the Blob into a blob: URL to save it.
async function downloadAttachment(attachmentId) {
  let response;
  try {
    response = await fetch(`${ROOT}/attachments/${encodeURIComponent(attachmentId)}`, {
      method: "GET",
      headers: headers({ Accept: "application/octet-stream" }),
      cache: "no-store",
      credentials: "omit",
    });
  } catch {
    throw new ApiError(0, "The server cannot be reached. Is `mail server` running?");
  }
  if (!response.ok) throw await failure(response);
  const disposition = response.headers.get("Content-Disposition") || "";
  const match = /filename\*=UTF-8''([^;]+)/i.exec(disposition);
  let filename = attachmentId;
  if (match) {
    try {
      filename = decodeURIComponent(match[1]);
    } catch {
      // keep the id
    }
  }
  return { blob: await response.blob(), filename, sha256: response.headers.get("X-Content-SHA256") || "" };
}
