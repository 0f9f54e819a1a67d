// Threads (team tools): the group conversations of the caller's swarm instance (an admin sees
// every instance's), and one thread with its participants, their unread counts and its posts
// in order — membership changes included — with downloads for the attachments they name.

import { api } from "../api.js";
import { attachmentList, attachmentsNamedIn } from "../attachments.js";
import { badge, emptyState, errorState, formatTime, h, loadingState, relativeTime, replace, shortId } from "../dom.js";
import { isAdmin, store } from "../store.js";

export function render(container, params) {
  const selected = params[0] || null;
  const list = h("section", { class: "thread-list-pane", "aria-label": "Threads" });
  const detail = h("section", { class: "thread-detail", id: "thread-detail", "aria-label": "Thread" });
  const refresh = h("button", { type: "button", class: "btn btn-quiet", onclick: () => { loadList(); if (selected) loadThread(); } }, "Refresh");
  container.appendChild(h("div", { class: `threads-screen${selected ? " has-detail" : ""}` },
    h("div", { class: "toolbar" }, h("h1", {}, "Threads"),
      selected ? h("a", { class: "btn btn-quiet thread-back", href: "#/threads" }, "← All threads") : null,
      refresh),
    h("div", { class: "threads-grid" }, list, detail)));

  let alive = true;
  const loadList = async () => {
    replace(list, loadingState("threads"));
    try {
      const threads = (await api.threads()).threads || [];
      if (!alive) return;
      threads.sort((a, b) => String(b.updated_at).localeCompare(String(a.updated_at)));
      if (!threads.length) {
        replace(list, emptyState("No threads yet",
          "Agents with the threads team tools open threads with create_thread; they appear here and stay across tasks."));
        return;
      }
      replace(list, h("ul", { class: "thread-list", id: "thread-list" }, threads.map((t) =>
        h("li", {}, h("a", {
          class: `thread-row${t.thread_id === selected ? " active" : ""}`,
          href: `#/threads/${encodeURIComponent(t.thread_id)}`, dataset: { thread: t.thread_id },
        },
        h("span", { class: "thread-title" }, t.title || t.thread_id),
        h("span", { class: "muted thread-people" }, (t.participants || []).join(", ")),
        h("span", { class: "thread-meta" },
          isAdmin() && t.owner !== `${store.me.role}:${store.me.id}` ? badge(t.owner, "remote") : null,
          h("time", { class: "muted", title: t.updated_at }, relativeTime(t.updated_at))))))));
    } catch (error) {
      if (alive) replace(list, errorState("Could not load threads", error, loadList));
    }
  };

  const loadThread = async () => {
    replace(detail, loadingState("the thread"));
    try {
      const thread = await api.thread(selected);
      if (alive) replace(detail, threadView(thread));
    } catch (error) {
      if (!alive) return;
      replace(detail, error.status === 404
        ? emptyState("Thread not found", `There is no thread ${selected} in your swarm instance.`,
          h("a", { class: "btn", href: "#/threads" }, "All threads"))
        : errorState("Could not load the thread", error, loadThread));
    }
  };

  loadList();
  if (selected) loadThread();
  else replace(detail, emptyState("Pick a thread", "Its participants and posts show here."));
  return () => { alive = false; };
}

function threadView(thread) {
  const unread = thread.unread || {};
  const participants = h("ul", { class: "participants", id: "thread-participants" },
    (thread.participants || []).map((name) => {
      const count = unread[name] || 0;
      return h("li", { class: "participant", dataset: { agent: name, unread: String(count) } },
        h("a", { href: `#/agents/${encodeURIComponent(name)}` }, name),
        name === thread.creator ? badge("Creator", "info") : null,
        h("span", { class: `unread${count ? " unread-some" : ""}`, title: `${count} unread post(s)` },
          count ? `${count} unread` : "all read"));
    }));
  const posts = thread.messages || [];
  return h("div", { class: "thread" },
    h("header", { class: "thread-head" },
      h("h2", { id: "thread-title" }, thread.title || thread.thread_id),
      h("dl", { class: "facts" },
        h("dt", {}, "Thread"), h("dd", { class: "mono" }, thread.thread_id),
        h("dt", {}, "Started"), h("dd", {}, `by ${thread.creator} · ${formatTime(thread.created_at)}`),
        thread.owner ? [h("dt", {}, "Instance"), h("dd", {}, thread.owner)] : null),
      h("h3", {}, "Participants"), participants),
    h("h3", {}, `Posts (${posts.length})`),
    posts.length
      ? h("ol", { class: "posts", id: "thread-posts" }, posts.map(postView))
      : emptyState("No posts yet", "Participants post with post_to_thread."));
}

function postView(post) {
  if (post.kind === "membership") {
    return h("li", { class: "post post-membership", dataset: { post: post.post_id, kind: "membership" } },
      h("span", { class: "post-body" }, post.body),
      h("time", { class: "muted", title: post.timestamp }, formatTime(post.timestamp)));
  }
  return h("li", { class: `post${post.urgent ? " post-urgent" : ""}`, dataset: { post: post.post_id, kind: "post" } },
    h("header", {},
      h("a", { class: "post-sender", href: `#/agents/${encodeURIComponent(post.sender)}` }, post.sender),
      post.urgent ? badge("Urgent", "bad") : null,
      post.task_id ? h("a", { class: "muted", href: `#/tasks/${encodeURIComponent(post.task_id)}`, title: post.task_id }, `task ${shortId(post.task_id)}`) : null,
      h("time", { title: post.timestamp }, formatTime(post.timestamp))),
    h("div", { class: "post-body" }, post.body),
    attachmentList(attachmentsNamedIn(post.body)));
}
