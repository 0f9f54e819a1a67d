// The event stream: every event the console has seen (live streams and opened tasks),
// filtered by type, agent and free text; each row expands to show its data.

import { attachmentList, attachmentsOf } from "../attachments.js";
import { emptyState, formatTime, h, pretty, replace, shortId } from "../dom.js";
import { involvement, searchText, summary, typeLabel, typeTone } from "../model.js";
import { clearEvents, store, subscribe } from "../store.js";

const MAX_ROWS = 500;
const filters = { types: new Set(), agent: "", text: "" };

export function eventRow(ev) {
  const s = summary(ev);
  return h("li", { class: "event-row", dataset: { event: ev.event, id: ev.id ?? "" } },
    h("details", {},
      h("summary", {},
        h("span", { class: `badge badge-${typeTone(ev.event)}` }, typeLabel(ev.event)),
        h("span", { class: "event-title" }, s.title,
          s.detail ? h("span", { class: "event-detail" }, s.detail) : null),
        h("span", { class: "event-meta" },
          h("a", { href: `#/tasks/${encodeURIComponent(ev.taskId)}`, title: ev.taskId }, shortId(ev.taskId)),
          h("time", {}, formatTime(ev.timestamp)))),
      h("dl", { class: "event-data" },
        h("dt", {}, "Event"), h("dd", {}, `${ev.event} #${ev.id ?? "—"}`),
        h("dt", {}, "Task"), h("dd", {}, ev.taskId),
        h("dt", {}, "Time"), h("dd", {}, ev.timestamp),
        h("dt", {}, "Description"), h("dd", {}, h("pre", {}, ev.description || "—")),
        attachmentsOf(ev).length ? [h("dt", {}, "Attachments"), h("dd", {}, attachmentList(attachmentsOf(ev)))] : null,
        h("dt", {}, "Data"), h("dd", {}, h("pre", {}, pretty(ev.extra))))));
}

export function render(container) {
  const search = h("input", { type: "search", id: "event-search", placeholder: "Search events", value: filters.text, "aria-label": "Search events" });
  const agentSelect = h("select", { id: "event-agent", "aria-label": "Agent" });
  const chips = h("div", { class: "chips", role: "group", "aria-label": "Event types" });
  const counter = h("span", { class: "muted", id: "event-count" });
  const list = h("ol", { class: "event-list", id: "event-list" });
  const clearBtn = h("button", { type: "button", class: "btn btn-quiet", onclick: () => clearEvents() }, "Clear");

  container.appendChild(h("div", { class: "events-screen" },
    h("div", { class: "toolbar" }, h("h1", {}, "Events"), search, agentSelect, counter, clearBtn),
    chips, list));

  search.addEventListener("input", () => { filters.text = search.value; update(); });
  agentSelect.addEventListener("change", () => { filters.agent = agentSelect.value; update(); });

  const renderChips = () => {
    const present = new Set(store.events.map((e) => e.event));
    for (const t of filters.types) present.add(t);
    replace(chips, [...present].sort().map((t) => {
      const on = filters.types.has(t);
      return h("button", {
        type: "button", class: `chip${on ? " on" : ""}`, "aria-pressed": on ? "true" : "false",
        dataset: { type: t },
        onclick: () => { on ? filters.types.delete(t) : filters.types.add(t); update(); },
      }, typeLabel(t));
    }));
    const names = (store.swarm.agents || []).map((a) => a.name);
    replace(agentSelect, h("option", { value: "" }, "All agents"),
      names.map((n) => h("option", { value: n, selected: n === filters.agent }, n)));
  };

  const update = () => {
    renderChips();
    const text = filters.text.trim().toLowerCase();
    const shown = store.events.filter((ev) =>
      (!filters.types.size || filters.types.has(ev.event)) &&
      (!filters.agent || involvement(ev).agents.has(filters.agent)) &&
      (!text || searchText(ev).includes(text)));
    counter.textContent = `${shown.length} of ${store.events.length}`;
    if (!store.events.length) {
      replace(list, emptyState("No events yet", "Events appear here while a task streams in the Chat, or when you open a task."));
      return;
    }
    if (!shown.length) {
      replace(list, emptyState("No event matches", "Change the type, agent or search filter."));
      return;
    }
    replace(list, shown.slice(-MAX_ROWS).reverse().map(eventRow));
  };
  update();
  return subscribe((what) => { if (what === "events") update(); });
}
