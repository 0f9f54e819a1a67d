// Sending to the swarm and following the answer, independent of any screen: the stream keeps
// feeding the store while the user looks at the graph or the event list.

import { api } from "./api.js";
import { attachmentsOf, isUserMessage } from "./attachments.js";
import { describeError } from "./dom.js";
import { callerOf, messageOf, normalizeEvent } from "./model.js";
import { addEvents, notify, store } from "./store.js";

function push(message) {
  store.chat.messages.push({ time: new Date().toISOString(), ...message });
  notify("chat");
}

// The final answer of a pause is a JSON list of the held calls: function calls at a
// breakpoint, or ({tool_call_id, caller, action, args, allowed_decisions, description}) for
// action review. null for any other answer (one that happens to start with '[' included).
function parseCalls(text, isCall) {
  if (typeof text !== "string" || !text.startsWith("[")) return null;
  try {
    const list = JSON.parse(text);
    if (Array.isArray(list) && list.length && list.every((c) => c && isCall(c))) return list;
  } catch {
    // an ordinary answer that happens to start with '['
  }
  return null;
}

export const parseHeldCalls = (text) => parseCalls(text, (c) => c.type === "function_call" && c.call_id);
export const parseReviewCalls = (text) => parseCalls(text, (c) => c.tool_call_id && Array.isArray(c.allowed_decisions));

// The agent that completed the task: the caller of the last task_complete among `events`.
export function completerOf(events) {
  for (let i = events.length - 1; i >= 0; i -= 1) {
    const ev = events[i];
    if (ev.event === "tool_call" && ev.extra.tool_name === "task_complete") return callerOf(ev);
  }
  return null;
}

// `steps` are the events of this turn of the task (what the trace under the answer shows).
// `state` "running": the answer of a message a newer one interrupted or rolled back.
function finish(taskId, response, steps, state) {
  if (state === "running") {
    push({ role: "system", taskId, text: String(response ?? "") });
    return;
  }
  const held = parseHeldCalls(response);
  const review = held ? null : parseReviewCalls(response);
  if (review) {
    push({ role: "review", taskId, calls: review, text: `Waiting for review: ${review.map((c) => c.action).join(", ")}` });
  } else if (held) {
    push({ role: "breakpoint", taskId, calls: held, text: `Paused at ${held.map((c) => c.name).join(", ")}` });
  } else {
    push({ role: "assistant", taskId, text: response == null ? "" : String(response), from: completerOf(steps), steps });
  }
}

// A held-calls bubble (breakpoint or review) is answered once the caller wrote after it.
export function isAnswered(messages, index) {
  return messages.slice(index + 1).some((m) => m.role === "user");
}

// What the chat says when a message goes in while the task still works (multitask_strategy).
const ALONGSIDE = {
  enqueue: "Queued: it goes to the swarm once the current work has its answer.",
  interrupt: "Interrupting: the agents' turns in flight stop, their finished work stays, and your message goes in now.",
  rollback: "Replacing: the earlier message's work is undone and your message takes its place.",
};

// Reads one event of a task's stream into the chat; false once the stream's answer came.
function reader(chat, sent, ended) {
  return (raw) => {
    const data = raw.data && typeof raw.data === "object" ? raw.data : {};
    if (data.task_id && !chat.taskId) chat.taskId = data.task_id;
    if (raw.event === "ping") return true;
    if (raw.event === "task_complete" && data.response !== undefined && raw.id == null) {
      ended.done = true;
      finish(data.task_id || chat.taskId, data.response, chat.progress.slice(), data.state);
      return false;
    }
    if (raw.event === "task_error" && raw.id == null) {
      ended.done = true;
      push({ role: "system", taskId: chat.taskId, text: `Error: ${data.response || data.description || "unknown error"}` });
      return false;
    }
    if (raw.id != null) chat.lastEventId = raw.id;
    const added = addEvents([raw], chat.taskId, { live: true });
    for (const ev of added) noteAttachments(ev, sent);
    if (added.length) {
      chat.progress.push(...added);
      notify("chat");
    }
    return true;
  };
}

// A message while the task still works, or one sent in the background: POST /message
// answered 202 at once; the chat follows the task's events until its next answer.
async function sendInBackground(body, text) {
  const chat = store.chat;
  const alongside = chat.busy;
  push({ role: "user", taskId: chat.taskId, text });
  const sent = chat.messages[chat.messages.length - 1];
  // The stream under way follows the task on once it ends (an interrupt ends it at once).
  if (alongside) chat.follow = true;
  try {
    const accepted = await api.message({ ...body, background: true });
    chat.taskId = accepted.task_id;
    push({
      role: "system", taskId: accepted.task_id,
      text: alongside ? ALONGSIDE[body.multitask_strategy] : `Running in the background as task ${accepted.task_id}; following it here.`,
    });
  } catch (error) {
    if (alongside) chat.follow = false;
    chat.messages = chat.messages.filter((m) => m !== sent);
    chat.draft = text;
    push({ role: "system", taskId: chat.taskId, text: `Error: ${describeError(error)}` });
    return;
  }
  if (!chat.busy) await follow(chat.taskId, chat.lastEventId); // nothing follows it yet
}

// Follows a task's events (GET /task/events after `afterId`) until its next answer.
async function follow(taskId, afterId) {
  const chat = store.chat;
  chat.busy = true;
  chat.follow = false;
  chat.progress = [];
  const controller = new AbortController();
  store.abort = controller;
  notify("chat");
  const ended = { done: false };
  try {
    await api.resubscribe(taskId, afterId, reader(chat, null, ended), controller.signal);
  } catch (error) {
    if (error.name !== "AbortError") push({ role: "system", taskId, text: `Error: ${describeError(error)}` });
  } finally {
    chat.busy = false;
    store.abort = null;
    notify("chat");
  }
  if (chat.follow && !controller.signal.aborted) await follow(taskId, chat.lastEventId);
}

// Sends `text` (or a breakpoint resume when `resume` is given, or action-review decisions
// when `review` is) and streams the task. A review that the server refuses before the stream
// opens (400, 409) goes to review.onRefused and leaves the chat as it was. `files` are
// POST /message attachments ({filename, size, content_base64}). While the task still works,
// a message goes in with `strategy` (enqueue, interrupt, rollback); `background` sends it
// without holding a stream for it (202), then follows the task.
export async function send({ text, entrypoint, resume, review, files, strategy, background }) {
  const chat = store.chat;
  if (chat.busy && !(text && chat.taskId && strategy && !resume && !review)) return;
  const body = { body: text || "", subject: "User Message" };
  if (chat.busy) {
    body.task_id = chat.taskId;
    body.multitask_strategy = strategy;
    await sendInBackground(body, text);
    return;
  }
  if (entrypoint && entrypoint !== store.swarm.entrypoint) body.entrypoint = entrypoint;
  if (resume) {
    if (chat.taskId !== resume.taskId) {
      // The chat follows the resumed task from here on.
      chat.messages = [];
    }
    body.task_id = resume.taskId;
    body.resume_from = "breakpoint_tool_call";
    body.kwargs = { breakpoint_tool_call_result: resume.result };
    chat.taskId = resume.taskId;
    push({ role: "user", taskId: resume.taskId, text: resume.summary, kind: "resume" });
  } else if (review) {
    body.task_id = review.taskId;
    body.resume_from = "action_review";
    body.kwargs = { decisions: review.decisions };
  } else {
    if (chat.taskId) {
      body.task_id = chat.taskId;
      body.resume_from = "user_response";
    }
    if (files && files.length) {
      body.attachments = files.map((f) => ({ filename: f.filename, content_base64: f.content_base64 }));
    }
    if (background) {
      await sendInBackground(body, text);
      return;
    }
    push({ role: "user", taskId: chat.taskId, text, attachments: (files || []).map((f) => ({ filename: f.filename, size: f.size })) });
  }
  const sent = chat.messages[chat.messages.length - 1];
  chat.busy = true;
  chat.progress = [];
  chat.error = null;
  const controller = new AbortController();
  store.abort = controller;
  notify("chat");
  const ended = { done: false };
  let opened = false;
  const onOpen = () => {
    opened = true;
    if (!review) return;
    if (chat.taskId !== review.taskId) chat.messages = [];
    chat.taskId = review.taskId;
    push({ role: "user", taskId: review.taskId, text: review.summary, kind: "review" });
    if (review.onOpen) review.onOpen();
  };
  try {
    await api.streamMessage(body, reader(chat, sent, ended), controller.signal, onOpen);
    if (!ended.done && !controller.signal.aborted) {
      push({ role: "system", taskId: chat.taskId, text: "The stream ended without an answer. Open the task to see where it stands." });
    }
  } catch (error) {
    if (review && !opened && error.name !== "AbortError") {
      if (review.onRefused) review.onRefused(error);
    } else if (error.name !== "AbortError") {
      const tooLarge = error.status === 413 && body.attachments;
      if (!opened && text && !resume && !review) {
        // Refused before the task began: nothing was sent, so the words go back to the composer.
        chat.draft = text;
        chat.messages = chat.messages.filter((m) => m !== sent);
      }
      push({
        role: "system", taskId: chat.taskId,
        text: tooLarge
          ? `The server refused the attachment as too large. Nothing was sent. (${describeError(error)})`
          : `Error: ${describeError(error)}`,
      });
    }
  } finally {
    chat.busy = false;
    store.abort = null;
    notify("chat");
  }
  // A message sent while this one worked: its answer comes on the task's stream.
  if (chat.follow && chat.taskId && !controller.signal.aborted) await follow(chat.taskId, chat.lastEventId);
}

// The server gives uploaded files their ids: the user's message event lists them, so the
// chat bubble can offer downloads. A file an agent sends to the user gets a bubble of its own.
function noteAttachments(ev, sent) {
  const metas = attachmentsOf(ev);
  if (!metas.length) return;
  if (isUserMessage(ev) && sent && sent.attachments && sent.attachments.some((a) => !a.id)) {
    sent.attachments = metas;
    notify("chat");
  } else if (ev.event === "attachment" && ev.extra.recipient === "user") {
    push({ role: "assistant", taskId: ev.taskId, from: ev.extra.sender, text: `Sent you ${metas[0].filename}`, attachments: metas });
  }
}

export function stopWatching() {
  if (store.abort) store.abort.abort();
  push({ role: "system", taskId: store.chat.taskId, text: "Stopped watching. The task keeps running on the server; open it from Tasks." });
}

export function newConversation() {
  if (store.abort) store.abort.abort();
  store.chat = { taskId: null, entrypoint: store.chat.entrypoint, messages: [], busy: false, error: null, progress: [] };
  notify("chat");
}

// Rebuilds a chat from a task record (to continue it): the caller's messages and the answers.
export function openTaskInChat(record) {
  if (store.abort) store.abort.abort();
  const events = (record.events || []).map((e) => normalizeEvent(e, record.task_id));
  addEvents(events);
  const messages = [];
  let steps = [];
  for (const ev of events) {
    const msg = messageOf(ev);
    if (ev.event === "new_message" && msg && ["user", "admin"].includes(msg.sender.address_type)) {
      messages.push({ role: "user", taskId: record.task_id, text: msg.body, time: ev.timestamp, attachments: attachmentsOf(ev) });
      steps = [ev];
    } else if (ev.event === "tool_call" && ev.extra.tool_name === "task_complete") {
      const args = ev.extra.tool_args || {};
      steps.push(ev);
      messages.push({
        role: "assistant", taskId: record.task_id, text: String(args.finish_message ?? ""), time: ev.timestamp,
        from: callerOf(ev), steps,
      });
      steps = [];
    } else {
      steps.push(ev);
    }
  }
  const lastEventId = events.length ? events[events.length - 1].id : null;
  store.chat = { taskId: record.task_id, entrypoint: store.chat.entrypoint, messages, busy: false, error: null, progress: [], lastEventId };
  notify("chat");
}
