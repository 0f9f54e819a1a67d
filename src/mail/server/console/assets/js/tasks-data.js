// Task records: loading one (admins also reach other callers' tasks), their status, and
// following a running one.

import { api, ApiError } from "./api.js";
import { heldCalls, normalizeEvent } from "./model.js";
import { addEvents, isAdmin, store } from "./store.js";

export async function loadTask(taskId) {
  try {
    return await api.task(taskId);
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 404 || !isAdmin()) throw error;
    // Not one of the admin's own tasks: ask for it among every caller's.
    const all = await api.anyTask(taskId);
    const found = (all.tasks || []).find((t) => t.task_id === taskId);
    if (!found) throw error;
    return found;
  }
}

export function taskEvents(record) {
  return (record.events || []).map((e) => normalizeEvent(e, record.task_id));
}

// The breakpoint calls a task is paused on. Task records carry them as
// `pending_breakpoints` (GET /tasks summaries have no events); the events add the reasoning.
export function pausedCalls(record, events) {
  const fromEvents = heldCalls(events || taskEvents(record), store.swarm.breakpoint_tools);
  const pending = record.pending_breakpoints;
  if (!Array.isArray(pending)) return fromEvents;
  const reasoning = new Map(fromEvents.map((c) => [c.callId, c.reasoning]));
  return pending.map((c) => ({
    callId: c.tool_call_id,
    name: c.tool_name,
    args: c.tool_args,
    caller: c.caller,
    reasoning: reasoning.get(c.tool_call_id),
  }));
}

export function taskStatus(record, events) {
  const held = pausedCalls(record, events);
  if (record.is_running) return { label: "Running", tone: "info" };
  if ((record.pending_reviews || []).length) return { label: "Review", tone: "warn" };
  if (held.length) return { label: "Breakpoint", tone: "warn" };
  if (record.state === "failed") return { label: "Failed", tone: "bad" };
  if (record.completed) return { label: "Done", tone: "good" };
  return { label: "Idle", tone: "plain" };
}

export function lastEventId(taskId) {
  let best = 0;
  for (const ev of store.events) {
    if (ev.taskId === taskId && /^\d+$/.test(String(ev.id ?? ""))) best = Math.max(best, Number(ev.id));
  }
  return best || null;
}

const CLOSING = new Set(["task_complete", "task_error"]);
const MAX_RETRIES = 5;

// Follows a running task through the stream-resubscribe route GET /task/events, starting
// after `after` (default: the last event id the console holds for the task) until the
// closing event (task_complete / task_error without an id: the task ended or paused).
// `event: resubscribe` (the server cut a slow reader) and a dropped connection both
// re-attach after the last id received, so nothing is lost or repeated. onEvents gets the
// new normalized events (also added to the store); `stats` counts what arrived (received,
// duplicates, outOfOrder, reconnects).
export async function follow(taskId, onEvents, signal, { after, stats = {} } = {}) {
  let last = Number(after ?? lastEventId(taskId) ?? 0);
  Object.assign(stats, { received: 0, duplicates: 0, outOfOrder: 0, reconnects: 0 });
  let retries = 0;
  while (!signal.aborted) {
    let closed = false;
    let progressed = false;
    await api.resubscribe(taskId, last, (raw) => {
      if (raw.event === "ping") return true;
      if (raw.event === "resubscribe") {
        const data = raw.data && typeof raw.data === "object" ? raw.data : {};
        if (/^\d+$/.test(String(data.last_event_id ?? ""))) last = Math.max(last, Number(data.last_event_id));
        return false;
      }
      if (CLOSING.has(raw.event) && !raw.id) {
        closed = true;
        return false;
      }
      progressed = true;
      stats.received += 1;
      const ev = normalizeEvent(raw, taskId);
      addEvents([ev], taskId, { live: true });
      if (/^\d+$/.test(String(raw.id ?? ""))) {
        const id = Number(raw.id);
        if (id <= last) {
          stats.duplicates += 1;
          return true;
        }
        if (id !== last + 1) stats.outOfOrder += 1;
        last = id;
      }
      onEvents([ev]);
      return true;
    }, signal).catch((error) => {
      if (error.name === "AbortError") return;
      // A dropped connection is retried below; an HTTP error (400, 404, ...) is final.
      if (error instanceof ApiError && error.status !== 0) throw error;
    });
    if (closed || signal.aborted) return;
    retries = progressed ? 0 : retries + 1;
    if (retries > MAX_RETRIES) throw new ApiError(0, "The task's stream keeps closing; open the task again later.");
    stats.reconnects += 1;
    if (!progressed) await new Promise((resolve) => setTimeout(resolve, 500 * retries));
  }
}
