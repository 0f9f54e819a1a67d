// Console state shared by the screens: who is signed in, the swarm, every event seen, the
// chat of the current task. Screens subscribe and re-render what they show.

import { crossings, involvement, linkKey, normalizeEvent, rolledBack } from "./model.js";

const MAX_EVENTS = 5000;
const ACTIVE_MS = 3000;

const listeners = new Set();

export const store = {
  me: null, // {id, role}
  swarm: null, // GET /swarm
  events: [], // normalized, oldest first
  eventKeys: new Set(),
  activity: new Map(), // agent -> last time (ms) an event named it
  counts: new Map(), // agent -> number of events naming it
  linkCounts: new Map(), // "a|b" (sorted) -> messages that crossed the link
  linkActivity: new Map(), // "a|b" -> last time (ms) a live message crossed it
  remotes: new Set(), // remote swarms seen in events
  remoteLinks: new Set(), // "agent|@swarm" pairs seen talking across swarms
  chat: { taskId: null, entrypoint: null, messages: [], busy: false, error: null },
  abort: null,
};

export function subscribe(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

export function notify(what) {
  for (const fn of [...listeners]) fn(what);
}

export function isAdmin() {
  return store.me && store.me.role === "admin";
}

// Adds events (raw or normalized); returns the ones that were new.
export function addEvents(raws, fallbackTaskId, { live = false } = {}) {
  const added = [];
  for (const raw of raws) {
    if (!raw || raw.event === "ping") continue;
    const ev = raw.key ? raw : normalizeEvent(raw, fallbackTaskId);
    if (store.eventKeys.has(ev.key)) continue;
    store.eventKeys.add(ev.key);
    store.events.push(ev);
    added.push(ev);
    const { agents, remotes } = involvement(ev);
    for (const agent of agents) {
      store.counts.set(agent, (store.counts.get(agent) || 0) + 1);
      if (live) store.activity.set(agent, Date.now());
    }
    for (const link of crossings(ev)) {
      store.linkCounts.set(link, (store.linkCounts.get(link) || 0) + 1);
      if (live) store.linkActivity.set(link, Date.now());
    }
    for (const remote of remotes) {
      store.remotes.add(remote);
      for (const agent of agents) store.remoteLinks.add(`${agent}|@${remote}`);
    }
    const span = rolledBack(ev);
    if (span) forgetRolledBack(ev.taskId, span);
  }
  if (store.events.length > MAX_EVENTS) {
    for (const ev of store.events.splice(0, store.events.length - MAX_EVENTS)) {
      store.eventKeys.delete(ev.key);
    }
  }
  if (added.length) notify("events");
  return added;
}

// A rollback took these events of a task back: the task shows them no more.
function forgetRolledBack(taskId, [first, last]) {
  const gone = (ev) => ev.taskId === taskId && ev.id !== null && Number(ev.id) >= first && Number(ev.id) <= last;
  for (const ev of store.events.filter(gone)) store.eventKeys.delete(ev.key);
  store.events = store.events.filter((ev) => !gone(ev));
}

export function isActive(agent) {
  const t = store.activity.get(agent);
  return t !== undefined && Date.now() - t < ACTIVE_MS;
}

// A link glows while a message has just crossed it, not merely because one end is busy.
export function isLinkActive(a, b) {
  const t = store.linkActivity.get(linkKey(a, b));
  return t !== undefined && Date.now() - t < ACTIVE_MS;
}

export function clearEvents() {
  store.events = [];
  store.eventKeys = new Set();
  store.counts = new Map();
  store.linkCounts = new Map();
  notify("events");
}

export function resetSession() {
  if (store.abort) store.abort.abort();
  store.me = null;
  store.swarm = null;
  store.events = [];
  store.eventKeys = new Set();
  store.activity = new Map();
  store.counts = new Map();
  store.linkCounts = new Map();
  store.linkActivity = new Map();
  store.remotes = new Set();
  store.remoteLinks = new Set();
  store.chat = { taskId: null, entrypoint: null, messages: [], busy: false, error: null };
  store.abort = null;
}
