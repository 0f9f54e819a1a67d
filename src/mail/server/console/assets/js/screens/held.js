// What the breakpoint and action-review screens share: a task holding calls, as a row of
// their list, and loading one such task into the screen's body.

import { emptyState, errorState, h, loadingState, relativeTime, replace, taskName } from "../dom.js";
import { loadTask } from "../tasks-data.js";

// The screen: the list of tasks holding calls, or (with a task id in `params`) one of them.
// `showTask(body, taskId, alive)` and `showList(body, alive)` fill its body while `alive()`.
export function renderHeldScreen(container, params, { title, href, back }, showTask, showList) {
  const body = h("div", { class: "bp-body" });
  container.appendChild(h("div", { class: "bp-screen" },
    h("div", { class: "toolbar" }, h("h1", {}, title),
      params[0] ? h("a", { class: "btn btn-quiet", href }, back) : null),
    body));
  let alive = true;
  if (params[0]) showTask(body, params[0], () => alive);
  else showList(body, () => alive);
  return () => { alive = false; };
}

// One list row: `href` opens the task; `names` are the held calls' tool or action names.
export function heldTaskRow(href, record, names) {
  return h("li", {}, h("a", { class: "task-row", href },
    h("span", { class: "badge badge-warn" }, `${names.length} held`),
    h("span", { class: "task-title" }, taskName(record.task_id, record.title || record.first_message)),
    h("span", { class: "muted" }, names.join(", ")),
    h("time", { class: "muted" }, relativeTime(record.start_time))));
}

// The task record, or null once `body` shows why there is none (or the screen was left).
export async function loadHeldTask(body, taskId, alive, retry) {
  replace(body, loadingState("the task"));
  let record;
  try {
    record = await loadTask(taskId);
  } catch (error) {
    if (!alive()) return null;
    replace(body, error.status === 404 ? emptyState("Task not found", "It does not exist, or it belongs to someone else.")
      : errorState("Could not load the task", error, retry));
    return null;
  }
  return alive() ? record : null;
}
