// Action review: tasks paused because an agent called a reviewed action (`::action_review::`),
// the held calls with their caller, action, arguments and description, and per call the
// decisions it allows — accept, edit (a JSON editor for the arguments), ignore (with an
// optional note) or respond (a message). The decisions go back in one
// POST /message {resume_from: "action_review", kwargs: {decisions}}; a refusal (400, 409) is
// shown on the form and nothing changes.

import { api } from "../api.js";
import { send } from "../conversation.js";
import { emptyState, errorState, h, loadingState, pretty, replace, taskName } from "../dom.js";
import { store } from "../store.js";
import { heldTaskRow, loadHeldTask, renderHeldScreen } from "./held.js";

const DECISIONS = {
  accept: { label: "Accept", hint: "run it with these arguments" },
  edit: { label: "Edit", hint: "run it with arguments you change" },
  ignore: { label: "Ignore", hint: "do not run it" },
  respond: { label: "Respond", hint: "do not run it; send the agent a message instead" },
};

export function render(container, params) {
  return renderHeldScreen(container, params, { title: "Action review", href: "#/review", back: "All tasks waiting" }, showTask, showList);
}

async function showList(body, alive) {
  replace(body, loadingState("tasks waiting for review"));
  try {
    const records = Object.values(await api.tasks());
    if (!alive()) return;
    const waiting = records.filter((r) => (r.pending_reviews || []).length);
    waiting.sort((a, b) => String(b.start_time).localeCompare(String(a.start_time)));
    if (!waiting.length) {
      replace(body, emptyState("No call is waiting for review",
        "A task pauses here when an agent calls an action declared with \"review\": you decide whether it runs."));
      return;
    }
    replace(body, h("ul", { class: "task-list", id: "review-list" }, waiting.map((r) =>
      heldTaskRow(`#/review/${encodeURIComponent(r.task_id)}`, r, r.pending_reviews.map((c) => c.action)))));
  } catch (error) {
    if (alive()) replace(body, errorState("Could not load tasks", error, () => showList(body, alive)));
  }
}

async function showTask(body, taskId, alive) {
  const record = await loadHeldTask(body, taskId, alive, () => showTask(body, taskId, alive));
  if (!record) return;
  const calls = record.pending_reviews || [];
  if (!calls.length) {
    replace(body, emptyState("This task is not waiting for review", "Its held calls may have been decided already.",
      h("a", { class: "btn", href: `#/tasks/${encodeURIComponent(taskId)}` }, "Open the task")));
    return;
  }
  const cards = calls.map((call, i) => callCard(call, i));
  const error = h("p", { class: "form-error", role: "alert", id: "rv-error" });
  error.hidden = true;
  const submit = h("button", { type: "submit", class: "btn btn-primary", id: "rv-submit" }, "Send decisions");
  // After a refusal the held calls may have changed (someone else decided them): reload them.
  const again = h("button", { type: "button", class: "btn", id: "rv-reload", onclick: () => showTask(body, taskId, alive) }, "Load the current held calls");
  again.hidden = true;
  const name = taskName(taskId, record.title || record.first_message);
  const form = h("form", { class: "bp-form rv-form", id: "rv-form", novalidate: true },
    h("p", {}, calls.length === 1
      ? `${name} is paused: this call waits for your decision. The task continues when you send it.`
      : `${name} is paused: these ${calls.length} calls wait for your decisions. The task continues when you send them.`),
    cards.map((c) => c.el), error,
    h("div", { class: "actions" }, submit, again));
  const fail = (text, focus) => {
    error.textContent = text;
    error.hidden = false;
    if (focus) focus.focus();
  };
  form.addEventListener("input", () => { error.hidden = true; });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    error.hidden = true;
    const decisions = [];
    for (const card of cards) {
      const made = card.decision();
      if (made.error) return fail(made.error, made.focus);
      decisions.push(made.decision);
    }
    if (store.chat.busy) return fail("The chat is still streaming another task; wait for it or stop watching it.");
    submit.disabled = true;
    const summaryText = decisions.map((d) => `${d.type} ${calls.find((c) => c.tool_call_id === d.tool_call_id).action}`
      + (d.message ? `: ${d.message}` : "")).join("\n");
    send({
      review: {
        taskId, decisions, summary: summaryText,
        onOpen: () => { location.hash = "#/chat"; },
        onRefused: (refusal) => {
          submit.disabled = false;
          again.hidden = false;
          fail(`The server refused the decisions (${refusal.status || "no answer"}): ${refusal.message}`);
        },
      },
    });
  });
  replace(body, form);
}

// The server's description: its opening lines (up to the arguments) as a summary, the
// whole text on demand.
function description(text) {
  if (!text) return null;
  const full = String(text);
  const lines = full.split("\n");
  const cut = lines.findIndex((l) => /^arguments:/i.test(l.trim()));
  const first = lines.slice(0, cut > 0 ? Math.min(cut, 2) : 1).join(" ");
  return h("details", { class: "rv-desc" }, h("summary", {}, first), h("pre", {}, full));
}

function callCard(call, i) {
  const allowed = (call.allowed_decisions || []).filter((d) => DECISIONS[d]);
  const chosen = { value: allowed.length === 1 ? allowed[0] : null };
  const argsEditor = h("textarea", { id: `rv-args-${i}`, class: "mono", rows: 8, spellcheck: "false", "aria-label": `Arguments for ${call.action}` });
  argsEditor.value = pretty(call.args ?? {});
  const message = h("textarea", { id: `rv-message-${i}`, rows: 3, "aria-label": `Message for ${call.caller || "the agent"}` });
  const note = h("input", { type: "text", id: `rv-note-${i}`, "aria-label": "Note (optional)" });
  const panels = {
    edit: h("div", { class: "rv-panel" }, h("label", { for: `rv-args-${i}` }, "Arguments (JSON object; the complete new arguments)"), argsEditor),
    respond: h("div", { class: "rv-panel" }, h("label", { for: `rv-message-${i}` }, `Message to ${call.caller || "the agent"}`), message),
    ignore: h("div", { class: "rv-panel" }, h("label", { for: `rv-note-${i}` }, "Note for the agent (optional)"), note),
  };
  const showPanel = () => {
    for (const [name, panel] of Object.entries(panels)) panel.hidden = chosen.value !== name;
  };
  const choices = h("fieldset", { class: "rv-choices" }, h("legend", {}, "Decision"),
    allowed.map((d) => h("label", { class: "rv-choice" },
      h("input", { type: "radio", name: `rv-decision-${i}`, value: d, checked: chosen.value === d,
        onchange: () => { chosen.value = d; showPanel(); } }),
      h("span", {}, h("strong", {}, DECISIONS[d].label), h("span", { class: "muted" }, ` ${DECISIONS[d].hint}`)))));
  showPanel();
  const el = h("fieldset", { class: "bp-call rv-call", dataset: { call: call.tool_call_id || "" } },
    h("legend", {}, h("code", {}, call.action || "?"), call.caller ? ` called by ${call.caller}` : ""),
    h("p", { class: "muted mono" }, `call_id ${call.tool_call_id || "—"}`),
    description(call.description),
    h("pre", { class: "bp-args" }, pretty(call.args ?? {})),
    choices, allowed.filter((d) => panels[d]).map((d) => panels[d]));

  const decision = () => {
    const base = { tool_call_id: call.tool_call_id, type: chosen.value };
    const name = call.action || "the call";
    if (!chosen.value) return { error: `Choose a decision for ${name}.`, focus: el.querySelector("input[type=radio]") };
    if (chosen.value === "edit") {
      let args;
      try {
        args = JSON.parse(argsEditor.value);
      } catch (e) {
        return { error: `The arguments for ${name} are not valid JSON: ${e.message}`, focus: argsEditor };
      }
      if (!args || typeof args !== "object" || Array.isArray(args)) {
        return { error: `The arguments for ${name} must be a JSON object.`, focus: argsEditor };
      }
      return { decision: { ...base, args } };
    }
    if (chosen.value === "respond") {
      if (!message.value.trim()) return { error: `Write a message for ${name}.`, focus: message };
      return { decision: { ...base, message: message.value } };
    }
    if (chosen.value === "ignore" && note.value.trim()) return { decision: { ...base, message: note.value } };
    return { decision: base };
  };
  return { el, decision };
}
