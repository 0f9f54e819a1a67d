// The chat: talk to the swarm's entrypoint (or another entrypoint agent), watch the agents
// work while the answer streams in, continue the same task with another message.

import { attachmentList, clipIcon, formatSize, readPicked } from "../attachments.js";
import { emptyState, formatTime, h, replace, shortId } from "../dom.js";
import { isAnswered, newConversation, send, stopWatching } from "../conversation.js";
import { summary, typeLabel, typeTone } from "../model.js";
import { store, subscribe } from "../store.js";
import { buildTrace, traceTotal, traceView } from "../trace.js";

// Under an answer: the trace of the turn that produced it, folded (its open state survives
// re-renders of the timeline).
function answerTrace(m) {
  const trace = buildTrace(m.steps || []);
  if (!trace.turns.length) return null;
  const fold = h("details", { class: "bubble-trace", open: Boolean(m.traceOpen) },
    h("summary", {}, `Trace · ${traceTotal(trace)}`));
  fold.addEventListener("toggle", () => {
    m.traceOpen = fold.open;
    if (fold.open && !fold.querySelector(".trace")) fold.appendChild(traceView(m.steps, null, { ids: false }));
  });
  if (m.traceOpen) fold.appendChild(traceView(m.steps, null, { ids: false }));
  return fold;
}

// A breakpoint or review bubble: the held calls, and a way to answer them until that is done.
function heldBubble(m, answered) {
  const review = m.role === "review";
  const href = `#/${review ? "review" : "breakpoints"}/${encodeURIComponent(m.taskId)}`;
  return h("article", { class: `bubble bubble-breakpoint${review ? " bubble-review" : ""}${answered ? " bubble-answered" : ""}` },
    h("header", {}, answered
      ? (review ? "Was waiting for your review" : "Was paused at a breakpoint")
      : (review ? "Waiting for your review" : "Paused at a breakpoint")),
    h("ul", {}, m.calls.map((c) => (review
      ? h("li", {}, h("code", {}, c.action), " ", h("span", { class: "muted" }, `by ${c.caller}`))
      : h("li", {}, h("code", {}, c.name), " ", h("span", { class: "muted" }, String(c.arguments ?? "")))))),
    answered
      ? h("p", { class: "muted bubble-done" }, "Answered below.")
      : h("a", { class: "btn", href }, review ? "Review the held calls" : "Answer the held calls"));
}

function bubble(m, i, messages) {
  if (m.role === "breakpoint" || m.role === "review") return heldBubble(m, isAnswered(messages, i));
  const label = { user: "You", assistant: m.from || "Swarm", system: "System" }[m.role] || m.role;
  return h("article", { class: `bubble bubble-${m.role}`, dataset: m.from ? { agent: m.from } : {} },
    h("header", {}, h("span", { class: "bubble-from" }, label), h("time", {}, formatTime(m.time))),
    h("div", { class: "bubble-text" }, m.text),
    attachmentList(m.attachments),
    m.role === "assistant" ? answerTrace(m) : null);
}

export function render(container) {
  const swarm = store.swarm;
  const chat = store.chat;
  const entrypoints = swarm.entrypoints && swarm.entrypoints.length ? swarm.entrypoints : [swarm.entrypoint];
  if (!chat.entrypoint) chat.entrypoint = swarm.entrypoint;

  const select = h("select", { id: "chat-entrypoint", "aria-label": "Send to" },
    entrypoints.map((name) => h("option", { value: name, selected: name === chat.entrypoint }, name)));
  select.addEventListener("change", () => { chat.entrypoint = select.value; });
  const taskLabel = h("span", { class: "chat-task" });
  const newBtn = h("button", { type: "button", class: "btn btn-quiet", id: "chat-new", onclick: newConversation }, "New task");
  const timeline = h("div", { class: "timeline", id: "chat-timeline", "aria-live": "polite" });
  const input = h("textarea", {
    id: "chat-input", rows: 2, placeholder: "Message the swarm (Enter to send, Shift+Enter for a new line)",
    "aria-label": "Message",
  });
  const sendBtn = h("button", { type: "submit", class: "btn btn-primary", id: "chat-send" }, "Send");
  const stopBtn = h("button", { type: "button", class: "btn btn-danger", onclick: stopWatching }, "Stop watching");
  // Files to attach to the next message (POST /message `attachments`).
  const picker = h("input", { type: "file", id: "chat-files", multiple: true, class: "sr-only", "aria-label": "Attach files" });
  const pickBtn = h("label", { class: "btn btn-quiet composer-attach", for: "chat-files", title: "Attach files" }, "Attach");
  // While the task works, what a new message does (multitask_strategy); otherwise whether
  // it goes in the background (answered at once; the chat follows the task).
  const strategy = h("select", { id: "chat-strategy", "aria-label": "While it works" },
    h("option", { value: "enqueue" }, "Queue it"),
    h("option", { value: "interrupt" }, "Interrupt"),
    h("option", { value: "rollback" }, "Replace (roll back)"));
  const strategyLabel = h("label", { class: "inline composer-option", for: "chat-strategy" }, "While it works: ", strategy);
  const background = h("input", { type: "checkbox", id: "chat-background" });
  const backgroundLabel = h("label", { class: "inline composer-option", for: "chat-background" }, background, " Background");
  const picked = h("ul", { class: "picked", id: "chat-picked", "aria-label": "Files to send" });
  const pickError = h("p", { class: "form-error", id: "chat-file-error", role: "alert", hidden: true });
  const showPicked = () => {
    const files = [...picker.files];
    replace(picked, files.map((f, i) => h("li", { class: "chip" },
      clipIcon(), h("span", {}, `${f.name} · ${formatSize(f.size)}`),
      h("button", {
        type: "button", class: "chip-remove", "aria-label": `Remove ${f.name}`,
        onclick: () => {
          const keep = new DataTransfer();
          files.forEach((other, j) => { if (j !== i) keep.items.add(other); });
          picker.files = keep.files;
          showPicked();
        },
      }, "×"))));
    picked.hidden = !files.length;
    pickError.hidden = true;
  };
  picker.addEventListener("change", showPicked);
  const form = h("form", { class: "composer" }, picker, pickBtn, input, strategyLabel, backgroundLabel, sendBtn, stopBtn);

  const submit = async () => {
    const text = input.value.trim();
    if (!text || (store.chat.busy && !store.chat.taskId)) return;
    let files = [];
    try {
      files = await readPicked([...picker.files]);
    } catch (error) {
      pickError.textContent = error.message || String(error);
      pickError.hidden = false;
      return;
    }
    input.value = "";
    picker.value = "";
    showPicked();
    send({ text, entrypoint: select.value, files, strategy: strategy.value, background: background.checked });
  };
  form.addEventListener("submit", (e) => { e.preventDefault(); submit(); });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      submit();
    }
  });

  container.appendChild(h("div", { class: "chat-screen" },
    h("div", { class: "toolbar" },
      h("h1", {}, "Chat"),
      h("label", { class: "inline", for: "chat-entrypoint" }, "To ", select),
      taskLabel, newBtn),
    timeline, picked, pickError, form));

  const update = () => {
    const c = store.chat;
    replace(taskLabel, c.taskId
      ? h("a", { href: `#/tasks/${encodeURIComponent(c.taskId)}`, title: c.taskId },
        c.messages.length && c.messages[c.messages.length - 1].role === "review"
          ? `Task ${shortId(c.taskId)} (waiting for your review)`
          : `Task ${shortId(c.taskId)} (next message continues it)`)
      : null);
    const items = c.messages.map(bubble);
    if (c.busy) {
      const steps = (c.progress || []).slice(-8).map((ev) => h("li", {},
        h("span", { class: `badge badge-${typeTone(ev.event)}` }, typeLabel(ev.event)), " ", summary(ev).title));
      items.push(h("div", { class: "working", role: "status" },
        h("div", {}, h("span", { class: "spinner" }), " Working…"), h("ul", { class: "working-steps" }, steps)));
    }
    if (!items.length) {
      items.push(emptyState("Start a conversation",
        `Your message goes to ${chat.entrypoint || swarm.entrypoint}. Replies stream in here; the graph shows who is working.`));
    }
    replace(timeline, items);
    timeline.scrollTop = timeline.scrollHeight;
    // While the task works a message can still go in, with the strategy chosen beside it.
    const alongside = c.busy && Boolean(c.taskId);
    sendBtn.disabled = c.busy && !alongside;
    strategyLabel.hidden = !alongside;
    backgroundLabel.hidden = c.busy;
    stopBtn.hidden = !c.busy;
    // An empty chat is already a new task: nothing to offer until there is something to leave.
    newBtn.hidden = !c.taskId && !c.messages.length;
    if (c.draft) {
      // A message the server refused before the task began comes back to be fixed and resent.
      if (!input.value) input.value = c.draft;
      c.draft = null;
    }
  };
  showPicked();
  update();
  queueMicrotask(() => input.focus());
  const unsubscribe = subscribe((what) => { if (what === "chat") update(); });
  return unsubscribe;
}
