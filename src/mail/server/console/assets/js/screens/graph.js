// The agent graph, drawn as SVG: agents on a circle (the entrypoint on top), communication
// links between them (arrow only for one-way links), remote swarms as nodes on the right.
// Badges, event counts and a pulse for agents active in the last seconds update live.

import { emptyState, formatTime, h, replace, svg } from "../dom.js";
import { linkKey, summary, typeLabel, typeTone } from "../model.js";
import { isActive, isLinkActive, store, subscribe } from "../store.js";

const W = 900;
const H = 600;
const NODE_W = 168;
const NODE_H = 62;

export function layout(agents, entrypoint, remotes) {
  const ordered = [...agents].sort((a, b) => (a.name === entrypoint ? -1 : b.name === entrypoint ? 1 : 0));
  const n = ordered.length;
  const cx = remotes.length ? W * 0.42 : W / 2;
  const cy = H / 2;
  const r = n <= 1 ? 0 : Math.min(230, 90 + n * 28);
  const pos = new Map();
  ordered.forEach((a, i) => {
    const angle = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(n, 1);
    pos.set(a.name, { x: cx + r * Math.cos(angle), y: cy + r * Math.sin(angle) });
  });
  remotes.forEach((name, i) => {
    const step = H / (remotes.length + 1);
    pos.set(`@${name}`, { x: W - NODE_W / 2 - 20, y: step * (i + 1) });
  });
  return pos;
}

export function links(agents) {
  const local = new Set(agents.map((a) => a.name));
  const pairs = new Map();
  for (const a of agents) {
    for (const target of a.comm_targets) {
      const at = target.indexOf("@");
      const to = at >= 0 ? `@${target.slice(at + 1)}` : target;
      if (at < 0 && !local.has(to)) continue;
      const key = [a.name, to].sort().join("\u0000");
      const link = pairs.get(key) || { a: a.name, b: to, ab: false, ba: false };
      if (link.a === a.name) link.ab = true;
      else link.ba = true;
      pairs.set(key, link);
    }
  }
  return [...pairs.values()];
}

function edgeEnds(p, q) {
  // Start and end on the node boxes' borders, not their centres.
  const dx = q.x - p.x;
  const dy = q.y - p.y;
  const scale = (pt) => {
    const sx = Math.abs(dx) > 1e-6 ? (NODE_W / 2 + 6) / Math.abs(dx) : Infinity;
    const sy = Math.abs(dy) > 1e-6 ? (NODE_H / 2 + 6) / Math.abs(dy) : Infinity;
    return Math.min(sx, sy, 0.5) * pt;
  };
  return {
    x1: p.x + scale(dx), y1: p.y + scale(dy),
    x2: q.x - scale(dx), y2: q.y - scale(dy),
  };
}

function nodeView(agent, p) {
  const badges = [];
  if (agent.enable_entrypoint) badges.push(["entry", "Entry"]);
  if (agent.can_complete_tasks) badges.push(["completer", "Completer"]);
  if (agent.enable_interswarm) badges.push(["inter", "Interswarm"]);
  if (agent.external) badges.push(["inter", "MCP"]); // joined from outside (docs/mcp.md)
  let bx = -NODE_W / 2 + 10;
  const badgeEls = badges.map(([kind, label]) => {
    const w = label.length * 6.4 + 12;
    const g = svg("g", { class: `gbadge gbadge-${kind}`, transform: `translate(${bx},6)` },
      svg("rect", { width: w, height: 16, rx: 8 }),
      svg("text", { x: w / 2, y: 12, "text-anchor": "middle" }, label));
    bx += w + 4;
    return g;
  });
  const count = svg("g", { class: "gcount", transform: `translate(${NODE_W / 2 - 4},${-NODE_H / 2 + 2})` },
    svg("circle", { r: 12 }),
    svg("text", { y: 4, "text-anchor": "middle" }, "0"));
  const g = svg("g", {
    class: "gnode", transform: `translate(${p.x},${p.y})`, tabindex: 0, role: "link",
    "aria-label": `agent ${agent.name}`, "data-agent": agent.name,
  },
  svg("rect", { class: "gnode-box", x: -NODE_W / 2, y: -NODE_H / 2, width: NODE_W, height: NODE_H, rx: 10 }),
  svg("circle", { class: "gnode-pulse", cx: -NODE_W / 2 + 14, cy: -NODE_H / 2 + 16, r: 5 }),
  svg("text", { class: "gnode-name", x: -NODE_W / 2 + 26, y: -NODE_H / 2 + 21 }, agent.name),
  badgeEls, count);
  const open = () => { location.hash = `#/agents/${encodeURIComponent(agent.name)}`; };
  g.addEventListener("click", open);
  g.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") open(); });
  return { g, count: count.querySelector("text") };
}

function remoteView(name, p) {
  return svg("g", { class: "gnode gnode-remote", transform: `translate(${p.x},${p.y})`, "data-remote": name },
    svg("rect", { class: "gnode-box", x: -NODE_W / 2, y: -NODE_H / 2 + 8, width: NODE_W, height: NODE_H - 16, rx: 23 }),
    svg("text", { class: "gnode-name", "text-anchor": "middle", y: 5 }, `@${name}`));
}

export function render(container) {
  const swarm = store.swarm;
  const agents = swarm.agents || [];
  if (!agents.length) {
    container.appendChild(emptyState("This swarm has no agents", "Load a swarm definition with POST /swarms/load."));
    return null;
  }
  const canvas = h("div", { class: "graph-canvas" });
  const feed = h("ol", { class: "feed", "aria-label": "recent activity" });
  const panel = h("section", { class: "graph-side" },
    h("h2", {}, "Live activity"),
    h("p", { class: "muted" }, `Entrypoint: ${swarm.entrypoint || "—"} · ${agents.length} agents`),
    feed);
  container.appendChild(h("div", { class: "graph-screen" },
    h("section", { class: "graph-main" }, h("h1", { class: "sr-only" }, "Agent graph"), canvas, legend()),
    panel));

  let drawnRemotes = "";
  let drawnLinks = 0;
  let nodes = new Map();

  // Remote swarms: those agents link to, and those seen in events (tasks crossing swarms).
  const linked = agents.flatMap((a) => a.comm_targets.filter((t) => t.includes("@")).map((t) => t.split("@")[1]));
  const remoteNames = () => [...new Set([...store.remotes, ...linked])].filter((r) => r && r !== swarm.name).sort();

  const draw = () => {
    const remotes = remoteNames();
    drawnRemotes = remotes.join(",");
    drawnLinks = store.remoteLinks.size;
    const pos = layout(agents, swarm.entrypoint, remotes);
    const known = links(agents);
    const seen = new Set(known.map((l) => [l.a, l.b].sort().join("|")));
    for (const pair of store.remoteLinks) {
      const [a, b] = pair.split("|");
      if (pos.has(a) && pos.has(b) && !seen.has([a, b].sort().join("|"))) {
        // Seen in events only: drawn dashed, without a direction.
        known.push({ a, b, ab: true, ba: true });
      }
    }
    const edges = known.map((l) => {
      const p = pos.get(l.a);
      const q = pos.get(l.b);
      if (!p || !q) return null;
      const e = edgeEnds(p, q);
      return svg("line", {
        class: `gedge${l.b.startsWith("@") ? " gedge-remote" : ""}`,
        ...e,
        "data-edge": `${l.a}|${l.b}`,
        "marker-end": l.ab ? "url(#arrow)" : null,
        "marker-start": l.ba ? "url(#arrow-start)" : null,
        "data-both": l.ab && l.ba ? "1" : null,
      });
    });
    // How many messages crossed each link, on its middle (hidden while none did).
    const counts = known.map((l) => {
      const p = pos.get(l.a);
      const q = pos.get(l.b);
      if (!p || !q) return null;
      return svg("g", {
        class: "gedge-count", transform: `translate(${(p.x + q.x) / 2},${(p.y + q.y) / 2})`,
        "data-edge": `${l.a}|${l.b}`,
      }, svg("rect", { x: -14, y: -10, width: 28, height: 20, rx: 10 }), svg("text", { y: 4, "text-anchor": "middle" }, "0"));
    });
    // Two-way links carry no arrow (the convention: an arrow marks a one-way link).
    for (const e of edges) {
      if (e && e.getAttribute("data-both")) {
        e.removeAttribute("marker-end");
        e.removeAttribute("marker-start");
      }
    }
    nodes = new Map();
    const nodeEls = agents.map((a) => {
      const v = nodeView(a, pos.get(a.name));
      nodes.set(a.name, v);
      return v.g;
    });
    const remoteEls = remotes.map((r) => remoteView(r, pos.get(`@${r}`)));
    // Fit the view to the drawing (plus room for badges and count bubbles).
    const xs = [...pos.values()].map((p) => p.x);
    const ys = [...pos.values()].map((p) => p.y);
    const minX = Math.min(...xs) - NODE_W / 2 - 24;
    const minY = Math.min(...ys) - NODE_H / 2 - 24;
    const vw = Math.max(...xs) - Math.min(...xs) + NODE_W + 48;
    const vh = Math.max(...ys) - Math.min(...ys) + NODE_H + 48;
    const drawing = svg("svg", {
      class: "graph", viewBox: `${minX} ${minY} ${vw} ${vh}`, role: "img",
      "aria-label": `Agent graph of swarm ${swarm.name}`, preserveAspectRatio: "xMidYMid meet",
    },
    svg("defs", {},
      svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
        svg("path", { d: "M0,0 L10,5 L0,10 z", class: "garrow" })),
      svg("marker", { id: "arrow-start", viewBox: "0 0 10 10", refX: 1, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
        svg("path", { d: "M10,0 L0,5 L10,10 z", class: "garrow" }))),
    svg("g", { class: "gedges" }, edges), svg("g", { class: "gedge-counts" }, counts),
    svg("g", { class: "gnodes" }, nodeEls, remoteEls));
    replace(canvas, drawing);
    refresh();
  };

  const refresh = () => {
    for (const [name, v] of nodes) {
      const n = store.counts.get(name) || 0;
      v.count.textContent = n > 99 ? "99+" : String(n);
      v.g.classList.toggle("has-count", n > 0);
      v.g.classList.toggle("active", isActive(name));
    }
    for (const line of canvas.querySelectorAll(".gedge")) {
      const [a, b] = line.getAttribute("data-edge").split("|");
      line.classList.toggle("active", isLinkActive(a, b));
    }
    for (const label of canvas.querySelectorAll(".gedge-count")) {
      const [a, b] = label.getAttribute("data-edge").split("|");
      const n = store.linkCounts.get(linkKey(a, b)) || 0;
      label.querySelector("text").textContent = n > 99 ? "99+" : String(n);
      label.classList.toggle("has-count", n > 0);
    }
    const recent = store.events.slice(-12).reverse();
    replace(feed, recent.length ? recent.map((ev) => {
      const s = summary(ev);
      return h("li", {},
        h("span", { class: `badge badge-${typeTone(ev.event)}` }, typeLabel(ev.event)),
        h("time", { class: "muted" }, formatTime(ev.timestamp)),
        h("span", { class: "feed-text" }, s.title));
    }) : h("li", { class: "muted feed-empty" }, "No events yet. Send a message from the Chat screen and watch the agents light up."));
  };

  draw();
  const unsubscribe = subscribe((what) => {
    if (what !== "events") return;
    if (remoteNames().join(",") !== drawnRemotes || store.remoteLinks.size !== drawnLinks) draw();
    else refresh();
  });
  const timer = setInterval(refresh, 1000);
  return () => {
    unsubscribe();
    clearInterval(timer);
  };
}

function legend() {
  return h("ul", { class: "legend" },
    h("li", {}, h("span", { class: "badge badge-entry" }, "Entry"), " receives user messages"),
    h("li", {}, h("span", { class: "badge badge-completer" }, "Completer"), " may finish tasks"),
    h("li", {}, h("span", { class: "badge badge-inter" }, "Interswarm"), " talks to other swarms"),
    h("li", {}, h("span", { class: "legend-line" }), " link (arrow = one way)"));
}
