// Breakpoints: tasks paused on a breakpoint tool, the calls they hold, and a form to send
// the results back (one result object for a single call, or a list matched by call_id).

import { api } from "../api.js";
import { send } from "../conversation.js";
import { emptyState, errorState, h, loadingState, pretty, replace, taskName } from "../dom.js";
import { store } from "../store.js";
import { pausedCalls } from "../tasks-data.js";
import { heldTaskRow, loadHeldTask, renderHeldScreen } from "./held.js";

export function render(container, params) {
  return renderHeldScreen(container, params, { title: "Breakpoints", href: "#/breakpoints", back: "All paused tasks" }, showTask, showList);
}

async function showList(body, alive) {
  replace(body, loadingState("paused tasks"));
  try {
    const records = Object.values(await api.tasks());
    if (!alive()) return;
    const paused = records
      .map((r) => ({ r, calls: pausedCalls(r) }))
      .filter((x) => x.calls.length && !x.r.is_running);
    if (!paused.length) {
      const tools = store.swarm.breakpoint_tools || [];
      replace(body, emptyState("No task is waiting at a breakpoint",
        tools.length ? `This swarm pauses when an agent calls ${tools.join(", ")}.` : "This swarm declares no breakpoint tools."));
      return;
    }
    replace(body, h("ul", { class: "task-list", id: "bp-list" }, paused.map(({ r, calls }) =>
      heldTaskRow(`#/breakpoints/${encodeURIComponent(r.task_id)}`, r, calls.map((c) => c.name)))));
  } catch (error) {
    if (alive()) replace(body, errorState("Could not load tasks", error, () => showList(body, alive)));
  }
}

async function showTask(body, taskId, alive) {
  const record = await loadHeldTask(body, taskId, alive, () => showTask(body, taskId, alive));
  if (!record) return;
  const calls = pausedCalls(record);
  if (!calls.length) {
    replace(body, emptyState("This task is not waiting at a breakpoint", "It may have been resumed already.",
      h("a", { class: "btn", href: `#/tasks/${encodeURIComponent(taskId)}` }, "Open the task")));
    return;
  }
  const single = calls.length === 1;
  const mode = { value: single ? "object" : "list" };
  const fields = calls.map((c, i) => {
    const area = h("textarea", { id: `bp-result-${i}`, rows: 3, required: true, dataset: { call: c.callId || "" }, "aria-label": `Result for ${c.name}` });
    return { call: c, area, el: h("fieldset", { class: "bp-call" },
      h("legend", {}, h("code", {}, c.name), c.caller ? ` called by ${c.caller}` : ""),
      c.reasoning ? h("p", { class: "reasoning" }, String(c.reasoning)) : null,
      h("pre", { class: "bp-args" }, pretty(c.args)),
      h("p", { class: "muted mono" }, `call_id ${c.callId || "—"}`),
      h("label", { for: `bp-result-${i}` }, "Result"), area) };
  });
  const modeChoice = h("fieldset", { class: "bp-mode" }, h("legend", {}, "Send as"),
    h("label", {}, h("input", { type: "radio", name: "bp-mode", value: "object", checked: single, disabled: !single,
      onchange: () => { mode.value = "object"; } }), " one result object ", h("code", {}, '{"content": …}')),
    h("label", {}, h("input", { type: "radio", name: "bp-mode", value: "list", checked: !single,
      onchange: () => { mode.value = "list"; } }), " a list by call_id ", h("code", {}, '[{"call_id", "content"}]')));
  const error = h("p", { class: "form-error", role: "alert" });
  error.hidden = true;
  const form = h("form", { class: "bp-form", id: "bp-form", novalidate: true },
    h("p", {}, `${taskName(taskId, record.title || record.first_message)} is paused. Write what each held call should return, then resume the task.`),
    fields.map((f) => f.el), modeChoice, error,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "btn btn-primary", id: "bp-submit" }, "Resume task")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const missing = fields.find((f) => !f.area.value.trim());
    if (missing) {
      error.textContent = `Enter a result for ${missing.call.name}.`;
      error.hidden = false;
      missing.area.focus();
      return;
    }
    if (store.chat.busy) {
      error.textContent = "The chat is still streaming another task; wait for it or stop watching it.";
      error.hidden = false;
      return;
    }
    const result = mode.value === "object" && single
      ? { content: fields[0].area.value }
      : fields.map((f) => ({ call_id: f.call.callId, content: f.area.value }));
    const summaryText = fields.map((f) => `${f.call.name} → ${f.area.value}`).join("\n");
    send({ resume: { taskId, result, summary: summaryText } });
    location.hash = "#/chat";
  });
  replace(body, form);
}
