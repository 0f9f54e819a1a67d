// One agent: its links, its actions, and in order the messages it received and the tool
// calls it made (with the model's reasoning when the event carries it).

import { emptyState, formatTime, h, pretty, replace } from "../dom.js";
import { callerOf, messageOf } from "../model.js";
import { isActive, store, subscribe } from "../store.js";

function receivedBy(ev, name) {
  const msg = messageOf(ev);
  return ev.event === "new_message" && msg && msg.recipients.some((r) => r.address === name);
}

function entry(ev, name) {
  if (receivedBy(ev, name)) {
    const msg = messageOf(ev);
    if (msg.subject === "::task_complete::") return null;
    return h("li", { class: "trace-item trace-in" },
      h("header", {}, `Incoming ${msg.msgType || "message"} from ${msg.sender.address || "?"}`, h("time", {}, formatTime(ev.timestamp))),
      msg.subject && !msg.subject.startsWith("::") ? h("div", { class: "trace-subject" }, msg.subject) : null,
      h("pre", { class: "trace-body" }, msg.body));
  }
  if ((ev.event === "tool_call" || ev.event === "builtin_tool_call") && callerOf(ev) === name) {
    const args = ev.extra.tool_args && typeof ev.extra.tool_args === "object" ? ev.extra.tool_args : {};
    return h("li", { class: "trace-item trace-call" },
      ev.extra.reasoning ? h("p", { class: "reasoning" }, String(ev.extra.reasoning)) : null,
      h("header", {}, h("code", {}, ev.extra.tool_name || "tool"),
        args.target ? ` → ${args.target}` : "", h("time", {}, formatTime(ev.timestamp))),
      h("dl", { class: "args" }, Object.entries(args).flatMap(([k, v]) => [
        h("dt", {}, k),
        h("dd", {}, typeof v === "string" ? (v.length > 500 ? `${v.slice(0, 500)}…` : v) : pretty(v)),
      ])));
  }
  return null;
}

export function render(container, params) {
  const name = params[0];
  const agent = (store.swarm.agents || []).find((a) => a.name === name);
  if (!agent) {
    container.appendChild(emptyState(`No agent '${name || ""}' in this swarm`, "Pick one on the graph.",
      h("a", { class: "btn", href: "#/graph" }, "Back to the graph")));
    return null;
  }
  const trace = h("ol", { class: "trace", id: "agent-trace" });
  const footer = h("p", { class: "muted" });
  const status = h("span", {});
  container.appendChild(h("div", { class: "agent-screen" },
    h("div", { class: "toolbar" },
      h("a", { href: "#/graph", class: "btn btn-quiet" }, "← Graph"),
      h("h1", {}, agent.name), status),
    h("section", { class: "agent-facts" },
      h("div", {}, h("h2", {}, "Talks to"),
        agent.comm_targets.length
          ? h("ul", { class: "chip-list" }, agent.comm_targets.map((t) =>
            h("li", {}, t.includes("@") ? h("span", { class: "chip" }, t) : h("a", { class: "chip", href: `#/agents/${encodeURIComponent(t)}` }, t))))
          : h("p", { class: "muted" }, "Nobody (it can only answer)")),
      h("div", {}, h("h2", {}, "Actions"),
        agent.actions.length ? h("ul", { class: "chip-list" }, agent.actions.map((a) => h("li", { class: "chip" }, a)))
          : h("p", { class: "muted" }, "None"))),
    h("section", {}, h("h2", {}, "Activity"), trace, footer)));

  const update = () => {
    replace(status,
      agent.enable_entrypoint ? h("span", { class: "badge badge-entry" }, "Entry") : null,
      agent.can_complete_tasks ? h("span", { class: "badge badge-completer" }, "Completer") : null,
      agent.enable_interswarm ? h("span", { class: "badge badge-inter" }, "Interswarm") : null,
      isActive(name) ? h("span", { class: "badge badge-good" }, "Active") : null);
    const items = store.events.map((ev) => entry(ev, name)).filter(Boolean);
    const messages = items.filter((i) => i.classList.contains("trace-in")).length;
    footer.textContent = `${messages} messages, ${items.length - messages} tool calls`;
    replace(trace, items.length ? items : emptyState("No activity yet for this agent", "Send a message from the Chat, or open a task, to see what it did."));
  };
  update();
  const unsub = subscribe((what) => { if (what === "events") update(); });
  const timer = setInterval(update, 3000);
  return () => { unsub(); clearInterval(timer); };
}
