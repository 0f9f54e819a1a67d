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
    // Not one of the admin's own tasks: look through every caller's.
    const all = await api.allTasks();
    const found = (all.tasks || []).find((t) => t.task_id === taskId);
    if (!found) throw error;
    return found;
  }
}

export function taskEvents(record) {
  return (record.events || []).map((e) => normalizeEvent(e, record.task_id));
}

export function taskStatus(record, events) {
  const held = heldCalls(events || taskEvents(record), store.swarm.breakpoint_tools);
  if (record.is_running) return { label: "Running", tone: "info" };
  if (held.length) return { label: "Breakpoint", tone: "warn" };
  if (record.completed) return { label: "Done", tone: "good" };
  return { label: "Idle", tone: "plain" };
}

function lastEventId(taskId) {
  let best = 0;
  for (const ev of store.events) {
    if (ev.taskId === taskId && /^\d+$/.test(String(ev.id ?? ""))) best = Math.max(best, Number(ev.id));
  }
  return best || null;
}

// Follows a running task until it stops, through the stream-resubscribe route when the
// server has it, else by polling GET /task. Calls onChange after new events arrive.
export async function follow(taskId, onChange, signal) {
  try {
    await api.resubscribe(taskId, lastEventId(taskId), (raw) => {
      if (raw.event === "ping") return true;
      if (raw.event === "task_complete" || raw.event === "task_error") {
        onChange();
        return false;
      }
      if (addEvents([raw], taskId, { live: true }).length) onChange();
      return true;
    }, signal);
    return;
  } catch (error) {
    if (error.name === "AbortError") return;
    const missingRoute = error instanceof ApiError && (error.status === 404 || error.status === 405) && !/task/i.test(error.message);
    if (!missingRoute) throw error;
  }
  while (!signal.aborted) {
    const record = await loadTask(taskId);
    if (addEvents(taskEvents(record), taskId, { live: true }).length) onChange(record);
    if (!record.is_running) {
      onChange(record);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}
