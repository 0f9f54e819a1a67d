// A task's trace: its agent turns (one per model call) with the tool calls each made, placed
// on the task's time line (start offset, duration), with tokens and cost. Built from the
// task's events: `model_call` events carry the numbers, `tool_call` events follow the model
// call that produced them. Each row expands to the exact data its events hold.

import { h } from "./dom.js";

const ms = (v) => (v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${Math.round(v)} ms`);
const cost = (v) => (v ? `$${Number(v).toFixed(4)}` : "$0");

function agentOf(description) {
  const m = /^agent (\S+) called/.exec(description || "");
  return m ? m[1] : "";
}

export function buildTrace(events, startTime) {
  const start = Date.parse(startTime || (events[0] && events[0].timestamp) || "") || 0;
  const turns = [];
  let current = null;
  for (const ev of events) {
    const at = Date.parse(ev.timestamp || "") || start;
    if (ev.event === "model_call") {
      const x = ev.extra;
      const duration = Number(x.duration_ms) || 0;
      current = {
        agent: x.agent || "?",
        model: x.model || "",
        offset: Math.max(0, at - duration - start),
        duration,
        tokensIn: Number(x.input_tokens) || 0,
        tokensOut: Number(x.output_tokens) || 0,
        cost: Number(x.cost) || 0,
        finish: x.finish_reason || "",
        error: x.error || "",
        event: ev,
        tools: [],
      };
      turns.push(current);
    } else if (ev.event === "tool_call" && current && agentOf(ev.description) === current.agent) {
      current.tools.push({ name: ev.extra.tool_name || "?", offset: Math.max(0, at - start), event: ev });
    }
  }
  const total = turns.reduce((t, r) => ({
    tokens: t.tokens + r.tokensIn + r.tokensOut, cost: t.cost + r.cost,
  }), { tokens: 0, cost: 0 });
  const end = events.length ? (Date.parse(events[events.length - 1].timestamp || "") || start) : start;
  return { turns, total, span: Math.max(1, end - start) };
}

function details(label, data) {
  return h("details", { class: "trace-data" }, h("summary", {}, label),
    h("pre", { class: "mono" }, JSON.stringify(data, null, 2)));
}

function bar(offset, duration, span) {
  const left = Math.min(100, (offset / span) * 100);
  const width = Math.max(0.5, Math.min(100 - left, (duration / span) * 100));
  const fill = h("span", { class: "trace-bar-fill" });
  // CSSOM, not a style attribute: the Content-Security-Policy allows no inline styles.
  fill.style.marginLeft = `${left.toFixed(2)}%`;
  fill.style.width = `${width.toFixed(2)}%`;
  return h("span", { class: "trace-bar", "aria-hidden": "true" }, fill);
}

export function traceTotal(trace) {
  return `${trace.turns.length} model call${trace.turns.length === 1 ? "" : "s"} · ${trace.total.tokens} tokens · ${cost(trace.total.cost)}`;
}

// The trace tree. `ids` gives the task page its element ids; the chat shows one tree per answer
// and leaves them out (an id names one element on the page).
export function traceView(events, startTime, { ids = true } = {}) {
  const trace = buildTrace(events, startTime);
  if (!trace.turns.length) {
    return h("p", { class: "muted", id: ids ? "trace-empty" : null }, "No model calls recorded for this task.");
  }
  return h("div", { class: "trace", id: ids ? "task-trace" : null },
    h("p", { class: "muted trace-total", id: ids ? "trace-total" : null }, traceTotal(trace)),
    h("ol", { class: "trace-tree" }, trace.turns.map((t) => h("li", { class: "trace-turn", dataset: { agent: t.agent } },
      h("div", { class: "trace-row" },
        h("span", { class: "trace-name" }, `${t.agent} → ${t.model}`),
        h("span", { class: "muted mono" }, `+${ms(t.offset)}`),
        h("span", { class: "mono" }, ms(t.duration)),
        h("span", { class: "mono trace-tokens" }, `${t.tokensIn}↑ ${t.tokensOut}↓`),
        h("span", { class: "mono" }, cost(t.cost)),
        bar(t.offset, t.duration, trace.span)),
      t.error ? h("p", { class: "badge badge-bad" }, t.error) : null,
      details("model call", t.event.extra),
      t.tools.length ? h("ol", { class: "trace-tools" }, t.tools.map((c) => h("li", { class: "trace-tool" },
        h("div", { class: "trace-row" },
          h("span", { class: "trace-name" }, c.name),
          h("span", { class: "muted mono" }, `+${ms(c.offset)}`)),
        details("arguments", c.event.extra.tool_args ?? {})))) : null))));
}
