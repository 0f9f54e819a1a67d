// Boot, sign-in, the page frame and the hash router. Each screen is a module exporting
// `render(container, params)` that returns an optional clean-up function.

import { api, session } from "./api.js";
import { badge, describeError, h, replace } from "./dom.js";
import { isAdmin, resetSession, store } from "./store.js";
import * as graph from "./screens/graph.js";
import * as chat from "./screens/chat.js";
import * as events from "./screens/events.js";
import * as agent from "./screens/agent.js";
import * as tasks from "./screens/tasks.js";
import * as breakpoints from "./screens/breakpoints.js";
import * as review from "./screens/review.js";
import * as registry from "./screens/registry.js";
import * as threads from "./screens/threads.js";
import * as webhooks from "./screens/webhooks.js";
import * as crons from "./screens/crons.js";
import * as signin from "./screens/signin.js";

// Screens in the navigation; `admin` ones are shown to admins only. A new screen (threads,
// say) is one module and one line here.
const SCREENS = [
  { path: "graph", label: "Graph", module: graph },
  { path: "chat", label: "Chat", module: chat },
  { path: "events", label: "Events", module: events },
  { path: "tasks", label: "Tasks", module: tasks },
  { path: "breakpoints", label: "Breakpoints", module: breakpoints },
  { path: "review", label: "Review", module: review },
  { path: "threads", label: "Threads", module: threads },
  { path: "webhooks", label: "Webhooks", module: webhooks },
  { path: "crons", label: "Crons", module: crons },
  { path: "registry", label: "Registry", module: registry, admin: true },
];
const HIDDEN = { agents: agent };

const root = document.getElementById("app");
let cleanup = null;
let frame = null;
let healthTimer = null;
const HEALTH_POLL_MS = 15000;

function parseHash() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  return { path: parts[0] || "graph", params: parts.slice(1) };
}

export function navigate(path) {
  location.hash = `#/${path}`;
}

async function boot() {
  if (!session.key) return showSignIn();
  replace(root, h("div", { class: "boot" }, h("span", { class: "spinner" }), "Connecting…"));
  try {
    store.me = await api.whoami();
    store.swarm = await api.swarm();
  } catch (error) {
    const wrongKey = error.status === 401 || error.status === 403;
    if (wrongKey) session.key = null;
    return showSignIn(
      wrongKey ? `That key was not accepted (${describeError(error)}).` : describeError(error),
    );
  }
  frame = buildFrame();
  replace(root, frame.el);
  route();
}

function showSignIn(message) {
  if (cleanup) cleanup();
  cleanup = null;
  frame = null;
  clearInterval(healthTimer);
  healthTimer = null;
  replace(root, signin.render({ message, onSubmit: signIn }));
}

async function signIn(key) {
  session.key = key;
  await boot();
}

function signOut() {
  session.key = null;
  resetSession();
  history.replaceState(null, "", location.pathname);
  showSignIn();
}

function buildFrame() {
  const links = SCREENS.filter((s) => !s.admin || isAdmin()).map((s) =>
    h("a", { href: `#/${s.path}`, class: "nav-link", dataset: { path: s.path } }, s.label));
  const health = h("span", { class: "health-dot", title: "server health" });
  // Says why while the server is degraded (writes failing: a full disk, the database down).
  const alert = h("div", { class: "server-alert", role: "status", "aria-live": "polite" });
  const el = h("div", { class: "frame" },
    h("header", { class: "topbar" },
      h("div", { class: "brand" }, h("img", { src: "icon.svg", alt: "", class: "brand-icon" }), "MAIL"),
      h("div", { class: "swarm-name", title: store.swarm.description || "" },
        health, store.swarm.name),
      h("div", { class: "me" },
        badge(store.me.role, store.me.role === "admin" ? "warn" : "info"),
        h("span", { class: "me-id" }, store.me.id),
        h("button", { type: "button", class: "btn btn-quiet", onclick: signOut }, "Sign out"))),
    alert,
    h("nav", { class: "nav", "aria-label": "Screens" }, links),
    h("main", { class: "view", id: "view" }));
  pollHealth(health, alert);
  clearInterval(healthTimer);
  healthTimer = setInterval(() => pollHealth(health, alert), HEALTH_POLL_MS);
  return { el, view: el.querySelector("#view"), links };
}

async function pollHealth(dot, alert) {
  try {
    const body = await api.health();
    dot.className = `health-dot health-${body.status === "healthy" ? "ok" : "warn"}`;
    dot.title = `server health: ${body.status}`;
    alert.textContent = body.reason ? `Server ${body.status}: ${body.reason}` : "";
  } catch {
    dot.className = "health-dot health-bad";
    dot.title = "server unreachable";
  }
}

function route() {
  if (!frame) return;
  const { path, params } = parseHash();
  const screen = SCREENS.find((s) => s.path === path);
  const module = screen && (!screen.admin || isAdmin()) ? screen.module : HIDDEN[path];
  for (const link of frame.links) {
    const active = link.dataset.path === path || (path === "agents" && link.dataset.path === "graph");
    link.classList.toggle("active", active);
    // On a phone the navigation is a scrolling tab bar: keep the current tab in view.
    if (active) link.scrollIntoView({ block: "nearest", inline: "nearest" });
  }
  if (cleanup) cleanup();
  cleanup = null;
  replace(frame.view);
  if (!module) {
    frame.view.appendChild(h("div", { class: "state state-empty" },
      h("div", { class: "state-title" }, "No such screen"),
      h("p", { class: "state-hint" }, h("a", { href: "#/graph" }, "Go to the agent graph"))));
    return;
  }
  frame.view.dataset.screen = path;
  cleanup = module.render(frame.view, params) || null;
}

window.addEventListener("hashchange", route);
boot();
