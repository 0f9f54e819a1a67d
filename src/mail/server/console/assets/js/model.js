// Reading runtime events: who is involved, what to call them, how to summarise them.
// Pure functions over plain objects; no DOM.

export const EVENT_TYPES = [
  "new_message", "tool_call", "builtin_tool_call", "action_call", "action_complete",
  "action_error", "action_review", "action_review_decision", "breakpoint_tool_call", "agent_error", "task_complete", "task_error",
  "interswarm_message_sent", "interswarm_message_received", "interswarm_message_error",
  "interswarm_message_progress", "multitask_strategy",
];

export const TYPE_LABELS = {
  new_message: "Message",
  tool_call: "Tool",
  builtin_tool_call: "Built-in tool",
  action_call: "Action",
  action_complete: "Action done",
  action_error: "Action error",
  action_review: "Review",
  action_review_decision: "Decision",
  breakpoint_tool_call: "Breakpoint",
  agent_error: "Agent error",
  task_complete: "Complete",
  task_complete_call: "Completing",
  task_error: "Task error",
  interswarm_message_sent: "Interswarm out",
  interswarm_message_received: "Interswarm in",
  interswarm_message_error: "Interswarm error",
  interswarm_message_progress: "Interswarm progress",
  multitask_strategy: "Strategy",
};

export function typeLabel(name) {
  return TYPE_LABELS[name] || name.replace(/_/g, " ");
}

export function typeTone(name) {
  if (/error/.test(name)) return "bad";
  if (name === "breakpoint_tool_call" || name === "action_review" || name === "multitask_strategy") return "warn";
  if (name === "task_complete") return "good";
  if (name.startsWith("interswarm")) return "remote";
  if (name === "new_message") return "info";
  return "plain";
}

// One shape for events from a live stream ({event, id, data: {...}}) and from task records
// ({event, id, data: "<json>"}).
export function normalizeEvent(raw, fallbackTaskId) {
  let data = raw.data;
  if (typeof data === "string") {
    try {
      data = JSON.parse(data);
    } catch {
      data = { description: data };
    }
  }
  data = data && typeof data === "object" ? data : {};
  const taskId = data.task_id || fallbackTaskId || "";
  const extra = data.extra_data && typeof data.extra_data === "object" ? data.extra_data : {};
  return {
    key: `${taskId}#${raw.id ?? `${raw.event}@${data.timestamp}`}`,
    id: raw.id ?? null,
    event: raw.event || "message",
    taskId,
    timestamp: data.timestamp || "",
    description: typeof data.description === "string" ? data.description : "",
    extra,
    response: data.response,
  };
}

function splitAddress(address) {
  const text = String(address || "");
  const at = text.indexOf("@");
  return at < 0 ? { name: text, swarm: null } : { name: text.slice(0, at), swarm: text.slice(at + 1) };
}

export function messageOf(ev) {
  const full = ev.extra.full_message;
  if (!full || typeof full !== "object") return null;
  const msg = full.message || {};
  const recipients = msg.recipients || (msg.recipient ? [msg.recipient] : []);
  return {
    id: full.id,
    msgType: full.msg_type,
    subject: msg.subject || "",
    body: msg.body == null ? "" : String(msg.body),
    sender: msg.sender || {},
    recipients,
    senderSwarm: msg.sender_swarm,
    recipientSwarm: msg.recipient_swarm,
  };
}

const AGENT_PREFIX = /^agent ([\w.@-]+)/i;

// Local agents named by the event, and remote swarms it touches.
export function involvement(ev) {
  const agents = new Set();
  const remotes = new Set();
  const add = (address, type) => {
    if (!address || (type && type !== "agent")) return;
    const { name, swarm } = splitAddress(address);
    if (swarm) remotes.add(swarm);
    else if (name) agents.add(name);
  };
  if (typeof ev.extra.caller === "string") add(ev.extra.caller, "agent");
  const m = AGENT_PREFIX.exec(ev.description);
  if (m) add(m[1], "agent");
  const msg = messageOf(ev);
  if (msg) {
    add(msg.sender.address, msg.sender.address_type);
    for (const r of msg.recipients) add(r.address, r.address_type);
    for (const s of [msg.senderSwarm, msg.recipientSwarm]) if (s) remotes.add(s);
  }
  if (ev.event.startsWith("interswarm")) {
    for (const key of ["target_swarm", "source_swarm", "swarm"]) {
      if (typeof ev.extra[key] === "string") remotes.add(ev.extra[key]);
    }
  }
  return { agents, remotes };
}

// The links of the agent graph a message crossed: "a|b" keys (names sorted) between its
// sender and each recipient, an agent of another swarm standing for its swarm ("@meteo").
export function linkKey(a, b) {
  return [a, b].sort().join("|");
}

export function crossings(ev) {
  const msg = messageOf(ev);
  if (ev.event !== "new_message" || !msg || msg.sender.address_type !== "agent") return [];
  const node = (address) => {
    const { name, swarm } = splitAddress(address);
    return swarm ? `@${swarm}` : name;
  };
  const from = node(msg.sender.address);
  return msg.recipients
    .filter((r) => r.address_type === "agent" && r.address)
    .map((r) => node(r.address))
    .filter((to) => from && to && to !== from)
    .map((to) => linkKey(from, to));
}

export function callerOf(ev) {
  if (typeof ev.extra.caller === "string") return splitAddress(ev.extra.caller).name;
  const m = AGENT_PREFIX.exec(ev.description);
  return m ? splitAddress(m[1]).name : null;
}

export function summary(ev) {
  const msg = messageOf(ev);
  if (ev.event === "new_message" && msg) {
    const to = msg.recipients.map((r) => r.address).join(", ") || "?";
    return {
      title: `${msg.sender.address || "?"} → ${to}`,
      detail: msg.subject && !msg.subject.startsWith("::") ? msg.subject : `[${msg.msgType || "message"}]`,
    };
  }
  if ((ev.event === "tool_call" || ev.event === "builtin_tool_call") && ev.extra.tool_name) {
    return { title: `${callerOf(ev) || "agent"} called ${ev.extra.tool_name}`, detail: "" };
  }
  if (ev.event === "action_review" && ev.extra.action) {
    return { title: `${callerOf(ev) || "agent"} wants to call ${ev.extra.action}`, detail: "held for review" };
  }
  if (ev.event === "action_review_decision" && ev.extra.type) {
    return { title: `${ev.extra.type}: ${ev.extra.action || "call"} of ${callerOf(ev) || "agent"}`, detail: ev.extra.message ? String(ev.extra.message).slice(0, 160) : "" };
  }
  if (ev.event === "multitask_strategy" && ev.extra.action) {
    return { title: strategyTitle(ev.extra), detail: `multitask_strategy: ${ev.extra.strategy}` };
  }
  if (ev.event === "task_complete" && ev.response !== undefined) {
    return { title: "Task complete", detail: String(ev.response).slice(0, 160) };
  }
  const first = (ev.description || ev.event).split("\n")[0];
  return { title: first.slice(0, 200), detail: "" };
}

// What a message to a running task did (a `multitask_strategy` event's extra_data).
export function strategyTitle(extra) {
  const cancelled = (extra.cancelled_turns || []).join(", ") || "none";
  const span = extra.rolled_back_events;
  switch (extra.action) {
    case "queued": return `Message queued behind the current work (position ${extra.position})`;
    case "delivered": return "Queued message delivered";
    case "withdrawn": return "Queued message withdrawn (its caller's timeout passed first)";
    case "interrupted": return `Interrupted by a newer message (turns cancelled: ${cancelled})`;
    case "rolled_back":
      return `Rolled back for a newer message${span ? ` (events ${span.first}–${span.last} taken back)` : ""}`;
    default: return `${extra.strategy}: ${extra.action}`;
  }
}

// The span of event ids a rollback event took back: [first, last] as numbers, or null.
export function rolledBack(ev) {
  const span = ev.event === "multitask_strategy" ? ev.extra.rolled_back_events : null;
  return span ? [Number(span.first), Number(span.last)] : null;
}

export function searchText(ev) {
  let extra = "";
  try {
    extra = JSON.stringify(ev.extra);
  } catch {
    // ignore
  }
  return `${ev.event} ${ev.taskId} ${ev.description} ${extra}`.toLowerCase();
}

// Held breakpoint calls of a task, from its events: the tool calls of breakpoint tools made
// in the turn that paused it. Returns [] when the task is not paused at a breakpoint.
export function heldCalls(events, breakpointTools) {
  let pausedAt = -1;
  for (let i = events.length - 1; i >= 0; i--) {
    const name = events[i].event;
    if (name === "ping" || name === "task_complete") continue;
    if (name === "breakpoint_tool_call") pausedAt = i;
    break;
  }
  if (pausedAt < 0) return [];
  const tools = new Set(breakpointTools || []);
  const calls = [];
  for (let i = pausedAt - 1; i >= 0; i--) {
    const ev = events[i];
    if (ev.event !== "tool_call" && ev.event !== "builtin_tool_call") break;
    if (!tools.size || tools.has(ev.extra.tool_name)) {
      calls.unshift({
        callId: ev.extra.tool_call_id,
        name: ev.extra.tool_name,
        args: ev.extra.tool_args,
        caller: callerOf(ev),
        reasoning: ev.extra.reasoning,
      });
    }
  }
  return calls;
}
