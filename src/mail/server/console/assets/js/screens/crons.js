// Crons: the caller's scheduled tasks (docs/crons.md): each one's schedule and zone, what it
// sends, its next and latest run (a link to that run's task), why a run was refused; pause,
// resume or delete one, or schedule a new one. Everything comes from GET /crons; all text
// goes in as text.

import { actionOf, badge, describeError, emptyState, formatTime, h, listLoader, shortId, statusLine } from "../dom.js";
import { request } from "../api.js";

const path = (id) => `/crons/${encodeURIComponent(id)}`;
const cronsApi = {
  list: () => request("GET", "/crons"),
  create: (body) => request("POST", "/crons", body),
  update: (id, body) => request("PATCH", path(id), body),
  remove: (id) => request("DELETE", path(id)).catch((error) => {
    if (error instanceof SyntaxError) return null; // 204: no body to parse
    throw error;
  }),
};

export function render(container) {
  const list = h("section", { class: "wh-list", id: "cron-list", "aria-label": "Scheduled tasks" });
  const [message, say] = statusLine({ id: "cron-message" });
  let alive = true;
  const load = listLoader(list, {
    what: "scheduled tasks",
    fetch: async () => (await cronsApi.list()).crons || [],
    empty: () => emptyState("No scheduled tasks yet",
      "Schedule a message: the swarm gets it at each time, and each run is a task of yours."),
    show: (crons) => h("ul", { class: "wh-cards", id: "cron-cards" }, crons.map((cron) => card(cron, say, load))),
    failed: "Could not load your scheduled tasks",
    alive: () => alive,
  });
  container.appendChild(h("div", { class: "webhooks-screen" },
    h("div", { class: "toolbar" }, h("h1", {}, "Scheduled tasks"),
      h("button", { type: "button", class: "btn btn-quiet", onclick: load }, "Refresh")),
    message,
    h("div", { class: "wh-grid" }, h("div", { class: "wh-main" }, list), h("aside", {}, createForm(say, load)))));
  load();
  return () => { alive = false; };
}

function card(cron, say, reload) {
  const act = actionOf(say, reload);
  const text = cron.message?.body ?? cron.message?.message ?? "";
  return h("li", { class: "wh-card", dataset: { cron: cron.id } },
    h("div", { class: "wh-card-head" },
      h("span", { class: "mono wh-url" }, cron.schedule),
      h("span", { class: "muted" }, cron.timezone),
      cron.paused ? badge("paused", "warn") : badge("active", "good")),
    cron.description ? h("p", { class: "muted wh-desc" }, cron.description) : null,
    h("p", { class: "wh-desc cron-body" }, cron.message?.subject ? `${cron.message.subject}: ${text}` : text),
    h("p", { class: "hint" },
      cron.next_run ? `Next run ${formatTime(cron.next_run)}` : "Not scheduled while paused",
      ` · ${cron.runs} run${cron.runs === 1 ? "" : "s"}`,
      cron.last_run ? ` · latest ${formatTime(cron.last_run)} ` : "",
      cron.last_task_id ? h("a", { class: "mono", href: `#/tasks/${encodeURIComponent(cron.last_task_id)}`, title: cron.last_task_id }, shortId(cron.last_task_id)) : null),
    cron.last_error ? h("p", { class: "form-error wh-reason" }, `Latest run refused: ${cron.last_error}`) : null,
    h("div", { class: "wh-actions" },
      h("button", { type: "button", class: "btn btn-small", dataset: { pause: cron.id },
        onclick: act(cron.paused ? "Resumed." : "Paused.", () => cronsApi.update(cron.id, { paused: !cron.paused })) },
      cron.paused ? "Resume" : "Pause"),
      h("button", { type: "button", class: "btn btn-danger btn-small", onclick: async () => {
        if (!window.confirm(`Delete the scheduled task ${cron.schedule}? Runs already started go on.`)) return;
        await act("Scheduled task deleted.", () => cronsApi.remove(cron.id))();
      } }, "Delete")));
}

function createForm(say, onCreated) {
  const schedule = h("input", { id: "cron-schedule", required: true, placeholder: "0 9 * * 1-5", autocomplete: "off" });
  const zone = h("input", { id: "cron-zone", autocomplete: "off",
    value: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC" });
  const body = h("textarea", { id: "cron-body", required: true, rows: 3, placeholder: "What the swarm gets each time" });
  const submit = h("button", { type: "submit", class: "btn btn-primary", id: "cron-submit" }, "Schedule");
  const form = h("form", { class: "reg-form", id: "cron-form" }, h("h2", {}, "New scheduled task"),
    h("label", { for: "cron-schedule" }, "Schedule (cron: minute hour day month weekday)"), schedule,
    h("label", { for: "cron-zone" }, "Time zone"), zone,
    h("label", { for: "cron-body" }, "Message"), body,
    submit);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    submit.disabled = true;
    try {
      const made = await cronsApi.create({
        schedule: schedule.value.trim(), timezone: zone.value.trim() || "UTC", message: { body: body.value },
      });
      form.reset();
      say(`Scheduled: next run ${formatTime(made.next_run)}.`);
      onCreated();
    } catch (error) {
      say(`Could not schedule it: ${describeError(error)}`, true);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}
