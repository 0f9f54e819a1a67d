// Tasks: the caller's tasks (an admin may switch to every caller's), and one task in detail
// with its events, its status, and what can be done next.

import { api } from "../api.js";
import { openTaskInChat } from "../conversation.js";
import { badge, emptyState, errorState, h, loadingState, relativeTime, replace, shortId, taskName } from "../dom.js";
import { addEvents, isAdmin, store } from "../store.js";
import { follow, loadTask, pausedCalls, taskEvents, taskStatus } from "../tasks-data.js";
import { traceView } from "../trace.js";
import { eventRow } from "./events.js";

const firstLine = (text) => String(text || "").split("\n").find((l) => l.trim()) || "";
const seconds = (s) => (s == null ? "" : s >= 60 ? `${Math.floor(s / 60)} min ${Math.round(s % 60)} s` : `${s.toFixed(1)} s`);
const usageLine = (u) => (u ? `${u.total_tokens} tokens · $${Number(u.cost || 0).toFixed(4)}` : "");

const view = { all: false };

export function render(container, params) {
  return params[0] ? renderDetail(container, params[0]) : renderList(container);
}

function renderList(container) {
  const body = h("div", { class: "tasks-body" });
  const refresh = h("button", { type: "button", class: "btn btn-quiet", onclick: () => load() }, "Refresh");
  const scope = isAdmin()
    ? h("label", { class: "inline" },
      h("input", { type: "checkbox", id: "tasks-all", checked: view.all, onchange: (e) => { view.all = e.target.checked; load(); } }),
      " Every caller's tasks")
    : null;
  container.appendChild(h("div", { class: "tasks-screen" },
    h("div", { class: "toolbar" }, h("h1", {}, "Tasks"), scope, refresh), body));

  let alive = true;
  // Pages of summaries (GET /tasks or GET /tasks/all), newest first; "Load more" asks for the
  // next page with the X-Next-Cursor of the last one.
  let records = [];
  let next = null;
  const fetchPage = async (cursor) => {
    const got = view.all ? await api.allTasksPage(cursor) : await api.tasksPage(cursor);
    return { rows: view.all ? got.body.tasks || [] : Object.values(got.body), next: got.next };
  };
  const show = () => {
    if (!records.length) {
      replace(body, emptyState("No tasks yet", "A task starts when you send a message.",
        h("a", { class: "btn btn-primary", href: "#/chat" }, "Open the chat")));
      return;
    }
    const more = next
      ? h("button", { type: "button", class: "btn btn-quiet", id: "tasks-more", onclick: () => loadMore() }, "Load more")
      : null;
    replace(body, [h("ul", { class: "task-list", id: "task-list" }, records.map((r) => {
      const events = taskEvents(r);
      const st = taskStatus(r, events);
      return h("li", {},
        h("a", { class: "task-row", href: `#/tasks/${encodeURIComponent(r.task_id)}`, dataset: { task: r.task_id } },
          badge(st.label, st.tone),
          h("span", { class: "task-preview" },
            h("span", { class: "task-title" }, r.title || r.first_message || taskName(r.task_id)),
            r.answer ? h("span", { class: "muted task-answer" }, `→ ${firstLine(r.answer)}`) : null),
          view.all ? h("span", { class: "muted task-owner" }, r.task_owner) : null,
          h("span", { class: "muted mono task-ref", title: r.task_id }, shortId(r.task_id)),
          h("span", { class: "muted task-numbers" },
            [seconds(r.duration_s), usageLine(r.usage), `${r.event_count ?? events.length} events`].filter(Boolean).join(" · ")),
          h("time", { class: "muted", title: r.start_time }, relativeTime(r.start_time))));
    })), more].filter(Boolean));
  };
  const loadMore = async () => {
    try {
      const got = await fetchPage(next);
      if (!alive) return;
      records = records.concat(got.rows);
      next = got.next;
      show();
    } catch (error) {
      if (alive) replace(body, errorState("Could not load tasks", error, load));
    }
  };
  const load = async () => {
    replace(body, loadingState("tasks"));
    try {
      const got = await fetchPage(null);
      if (!alive) return;
      records = got.rows;
      next = got.next;
      show();
    } catch (error) {
      if (alive) replace(body, errorState("Could not load tasks", error, load));
    }
  };
  load();
  return () => { alive = false; };
}

function renderDetail(container, taskId) {
  const body = h("div", { class: "task-detail" }, loadingState("the task"));
  const title = h("h1", { id: "task-name", title: taskId }, taskName(taskId));
  container.appendChild(h("div", { class: "tasks-screen" },
    h("div", { class: "toolbar" }, h("a", { href: "#/tasks", class: "btn btn-quiet" }, "← Tasks"), title), body));
  const controller = new AbortController();
  // The events shown: the record's, then what the live stream adds (in the order received).
  let events = [];
  let record = null;
  let following = false;
  const stats = {};
  const heading = h("h2", {});
  const list = h("ol", { class: "event-list", id: "task-events" });
  const followState = h("span", { class: "badge badge-info", id: "follow-state", role: "status" });

  // Oldest first, the order the trace above reads in; a live update only appends.
  let rendered = 0; // events already in the list
  const renderEvents = (full = false) => {
    heading.textContent = `Events (${events.length})`;
    if (!full && rendered && events.length >= rendered) {
      for (const ev of events.slice(rendered)) list.appendChild(eventRow(ev));
    } else {
      replace(list, events.length ? events.map(eventRow)
        : emptyState("No events recorded", "The task has not done anything yet."));
    }
    rendered = events.length;
    followState.textContent = `Following live… ${stats.received || 0} new events`;
    Object.assign(followState.dataset, {
      received: stats.received || 0, duplicates: stats.duplicates || 0, outOfOrder: stats.outOfOrder || 0,
    });
  };
  let scheduled = false;
  const scheduleEvents = () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => { scheduled = false; renderEvents(); });
  };

  const show = (fresh, keepEvents = false) => {
    record = fresh;
    title.textContent = taskName(taskId, record.title || record.first_message);
    if (!keepEvents) events = taskEvents(record);
    addEvents(events);
    const st = taskStatus(record, events);
    const held = pausedCalls(record, events);
    const reviews = record.pending_reviews || [];
    const own = record.task_owner && store.me && record.task_owner.split("@")[0] === `${store.me.role}:${store.me.id}`;
    const actions = [
      h("button", { type: "button", class: "btn btn-quiet", onclick: () => reload() }, "Refresh"),
      own && !record.is_running && !reviews.length ? h("button", {
        type: "button", class: "btn", id: "task-continue",
        onclick: () => { openTaskInChat(record); location.hash = "#/chat"; },
      }, "Continue in chat") : null,
      held.length && own ? h("a", { class: "btn btn-primary", href: `#/breakpoints/${encodeURIComponent(taskId)}` }, "Answer held calls") : null,
      reviews.length && own ? h("a", { class: "btn btn-primary", id: "task-review", href: `#/review/${encodeURIComponent(taskId)}` }, `Review ${reviews.length} held call${reviews.length > 1 ? "s" : ""}`) : null,
      record.is_running && !following ? h("button", { type: "button", class: "btn btn-primary", id: "task-follow", onclick: () => startFollowing() }, "Follow live") : null,
      following ? followState : null,
      !following && stats.received !== undefined ? h("span", { class: "muted", id: "follow-done", dataset: { ...followState.dataset } },
        `Followed live: ${stats.received} events streamed`) : null,
    ];
    replace(body,
      record.answer ? h("div", { class: "task-answer-full", id: "task-answer" }, record.answer) : null,
      h("dl", { class: "facts" },
        h("dt", {}, "Status"), h("dd", {}, badge(st.label, st.tone)),
        h("dt", {}, "Id"), h("dd", { class: "mono", id: "task-id" }, record.task_id),
        h("dt", {}, "Owner"), h("dd", {}, record.task_owner || "—"),
        h("dt", {}, "Started"), h("dd", { title: record.start_time || "" }, relativeTime(record.start_time)),
        record.title ? [h("dt", {}, "Title"), h("dd", {}, record.title)] : null,
        (record.remote_swarms || []).length ? [h("dt", {}, "Remote swarms"), h("dd", {}, record.remote_swarms.join(", "))] : null,
        record.duration_s != null ? [h("dt", {}, "Duration"), h("dd", {}, seconds(record.duration_s))] : null,
        record.usage ? [h("dt", {}, "Usage"), h("dd", { id: "task-usage" }, usageLine(record.usage))] : null),
      h("div", { class: "actions" }, actions),
      h("h2", {}, "Trace"), traceView(events, record.start_time),
      heading, list);
    renderEvents(!keepEvents);
  };

  const failed = (error) => {
    if (controller.signal.aborted) return;
    replace(body, error.status === 404
      ? emptyState("Task not found", "It does not exist, or it belongs to someone else.", h("a", { class: "btn", href: "#/tasks" }, "All tasks"))
      : errorState("Could not load the task", error, reload));
  };

  const reload = async () => {
    try {
      show(await loadTask(taskId));
    } catch (error) {
      failed(error);
    }
  };

  // Attach to the running task after the last event shown; the stream's events are appended
  // to the list as they arrive. When it ends, the record's facts are refreshed and the list
  // keeps what was streamed (Refresh reloads it from the record).
  const startFollowing = async () => {
    if (following || !record) return;
    following = true;
    const last = events.reduce((m, e) => (/^\d+$/.test(String(e.id ?? "")) ? Math.max(m, Number(e.id)) : m), 0);
    show(record, true);
    try {
      await follow(taskId, (added) => { events.push(...added); scheduleEvents(); }, controller.signal, { after: last, stats });
    } catch (error) {
      following = false;
      if (!controller.signal.aborted) replace(body, errorState("Lost the task's stream", error, reload));
      return;
    }
    following = false;
    if (controller.signal.aborted) return;
    try {
      show(await loadTask(taskId), true);
    } catch (error) {
      failed(error);
    }
  };

  reload();
  return () => controller.abort();
}
