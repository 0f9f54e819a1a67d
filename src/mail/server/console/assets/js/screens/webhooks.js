// Webhooks: the caller's push subscriptions (create one — its signing secret is shown once —
// test, enable or disable, rotate the secret, delete) and the delivery log of the one chosen,
// every attempt with its status, latency and the start of the receiver's answer, and a retry
// button. Everything shown comes from GET /webhooks...; all text goes in as text.

import { actionOf, describeError, badge, emptyState, errorState, formatTime, h, listLoader, loadingState, relativeTime, replace, shortId, statusLine } from "../dom.js";
import { webhooksApi } from "../webhooks-api.js";

const STATUS_KIND = { delivered: "good", pending: "warn", failed: "bad" };

export function render(container, params) {
  const selected = params[0] || null;
  const list = h("section", { class: "wh-list", id: "wh-list", "aria-label": "Webhooks" });
  const log = h("section", { class: "wh-log", id: "wh-log", "aria-label": "Deliveries" });
  const [message, say] = statusLine({ id: "wh-message" });
  const secretBox = h("div", { class: "wh-secret", id: "wh-secret", role: "alert" });
  secretBox.hidden = true;
  const form = createForm(say, (made) => {
    showSecret(secretBox, made.secret, `Webhook ${made.id} created.`);
    loadList();
  });
  container.appendChild(h("div", { class: "webhooks-screen" },
    h("div", { class: "toolbar" }, h("h1", {}, "Webhooks"),
      selected ? h("a", { class: "btn btn-quiet", href: "#/webhooks" }, "← All webhooks") : null,
      h("button", { type: "button", class: "btn btn-quiet", onclick: () => { loadList(); if (selected) loadLog(); } }, "Refresh")),
    message, secretBox,
    h("div", { class: "wh-grid" }, h("div", { class: "wh-main" }, list, selected ? log : null), h("aside", {}, form))));

  let alive = true;
  const loadList = listLoader(list, {
    what: "webhooks",
    fetch: async () => (await webhooksApi.list()).webhooks || [],
    empty: () => emptyState("No webhooks yet",
      "Create one to have your tasks' endings, pauses and reviews POSTed to your server, signed (Standard Webhooks)."),
    show: (hooks) => h("ul", { class: "wh-cards", id: "wh-cards" },
      hooks.map((hook) => card(hook, hook.id === selected, { say, reload: loadList, secretBox }))),
    failed: "Could not load your webhooks",
    alive: () => alive,
  });

  const loadLog = async () => {
    replace(log, loadingState("deliveries"));
    try {
      const found = (await webhooksApi.deliveries(selected)).deliveries || [];
      if (!alive) return;
      replace(log, h("h2", {}, "Deliveries"), deliveryTable(found, selected, say, loadLog));
    } catch (error) {
      if (!alive) return;
      replace(log, error.status === 404
        ? emptyState("Webhook not found", `You have no webhook ${selected}.`, h("a", { class: "btn", href: "#/webhooks" }, "All webhooks"))
        : errorState("Could not load the deliveries", error, loadLog));
    }
  };

  loadList();
  if (selected) loadLog();
  return () => { alive = false; };
}

function showSecret(box, secret, title) {
  const value = h("code", { class: "wh-secret-value", id: "wh-secret-value" }, secret);
  const copy = h("button", { type: "button", class: "btn btn-small", onclick: async () => {
    try {
      await navigator.clipboard.writeText(secret);
      copy.textContent = "Copied";
    } catch {
      const range = document.createRange();
      range.selectNodeContents(value);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
    }
  } }, "Copy");
  replace(box,
    h("strong", {}, title),
    h("p", {}, "Its signing secret is shown this once: copy it to your receiver now. Verify each delivery with any Standard Webhooks library."),
    h("div", { class: "wh-secret-row" }, value, copy),
    h("button", { type: "button", class: "btn btn-quiet btn-small", onclick: () => { box.hidden = true; replace(box); } }, "I have saved it"));
  box.hidden = false;
}

function card(hook, active, { say, reload, secretBox }) {
  const state = hook.active ? badge("active", "good") : badge("disabled", "bad");
  const act = actionOf(say, reload);
  return h("li", { class: `wh-card${active ? " active" : ""}`, dataset: { webhook: hook.id } },
    h("div", { class: "wh-card-head" },
      h("a", { class: "mono wh-url", href: `#/webhooks/${encodeURIComponent(hook.id)}`, title: hook.url }, hook.url),
      state, hook.kind === "request" ? badge((hook.task_id || "").length < 36 ? "a cron's runs" : "one task", "info") : null, hook.scope === "all" ? badge("all callers", "warn") : null),
    h("div", { class: "chips" }, (hook.events || []).map((e) => h("span", { class: "chip" }, e))),
    hook.description ? h("p", { class: "muted wh-desc" }, hook.description) : null,
    hook.disabled_reason ? h("p", { class: "form-error wh-reason" }, hook.disabled_reason) : null,
    hook.failing_since && hook.active ? h("p", { class: "hint" }, `Failing since ${relativeTime(hook.failing_since)}`) : null,
    h("div", { class: "wh-actions" },
      h("a", { class: "btn btn-small", href: `#/webhooks/${encodeURIComponent(hook.id)}` }, "Deliveries"),
      h("button", { type: "button", class: "btn btn-small", dataset: { test: hook.id },
        onclick: act("Test delivery queued.", () => webhooksApi.test(hook.id)) }, "Send test"),
      h("button", { type: "button", class: "btn btn-small",
        onclick: act(hook.active ? "Webhook disabled." : "Webhook enabled.", () => webhooksApi.update(hook.id, { active: !hook.active })) },
      hook.active ? "Disable" : "Enable"),
      h("button", { type: "button", class: "btn btn-small", onclick: async () => {
        try {
          const made = await webhooksApi.rotate(hook.id, 86400);
          showSecret(secretBox, made.secret, "New secret: the old one keeps signing for 24 hours.");
        } catch (error) {
          say(`Could not rotate the secret: ${describeError(error)}`, true);
        }
      } }, "Rotate secret"),
      h("button", { type: "button", class: "btn btn-danger btn-small", onclick: async () => {
        if (!window.confirm(`Delete the webhook to ${hook.url}? Its delivery log goes too.`)) return;
        await act("Webhook deleted.", () => webhooksApi.remove(hook.id))();
        if (active) location.hash = "#/webhooks";
      } }, "Delete")));
}

function deliveryTable(rows, hookId, say, reload) {
  if (!rows.length) return emptyState("No deliveries yet", "Events of your tasks appear here as they are sent. Try “Send test”.");
  return h("ul", { class: "wh-deliveries", id: "wh-deliveries" }, rows.map((d) => {
    const retry = h("button", { type: "button", class: "btn btn-small", dataset: { retry: d.id }, onclick: async () => {
      retry.disabled = true;
      try {
        await webhooksApi.retry(hookId, d.id);
        say(`Delivery ${shortId(d.id.replace(/^msg_/, ""))} queued again.`);
      } catch (error) {
        say(`Could not retry: ${describeError(error)}`, true);
      }
      reload();
    } }, "Retry");
    return h("li", { class: "wh-delivery", dataset: { delivery: d.id, status: d.status } },
      h("details", {},
        h("summary", {},
          badge(d.status, STATUS_KIND[d.status] || "plain"),
          h("span", { class: "wh-type" }, d.event_type),
          d.task_id ? h("a", { class: "muted mono", href: `#/tasks/${encodeURIComponent(d.task_id)}`, title: d.task_id }, shortId(d.task_id)) : null,
          h("span", { class: "muted" }, `${d.attempts} attempt${d.attempts === 1 ? "" : "s"}`),
          d.last_status != null ? h("span", { class: "mono" }, `HTTP ${d.last_status}`) : null,
          h("time", { class: "muted", title: d.created_at }, formatTime(d.created_at)),
          summaryOf(d) ? h("span", { class: "muted wh-summary" }, summaryOf(d)) : null),
        h("div", { class: "wh-delivery-body" },
          h("p", { class: "hint" }, "webhook-id ", h("code", {}, d.id)),
          d.last_error ? h("p", { class: "form-error" }, d.last_error) : null,
          d.next_attempt_at ? h("p", { class: "hint" }, `Next attempt ${formatTime(d.next_attempt_at)}`) : null,
          attemptsTable(d.attempts_log || []),
          d.status === "pending" && d.attempts === 0 ? null : retry)));
  }));
}

// What the event says (a task's answer, a review's call), first line: tells deliveries apart.
function summaryOf(delivery) {
  const text = delivery.payload?.data?.summary;
  return typeof text === "string" ? text.split("\n").find((l) => l.trim()) || "" : "";
}

function attemptsTable(attempts) {
  if (!attempts.length) return h("p", { class: "hint" }, "Not attempted yet.");
  return h("table", { class: "table wh-attempts" },
    h("thead", {}, h("tr", {}, ["#", "When", "Status", "Latency", "Answer"].map((t) => h("th", {}, t)))),
    h("tbody", {}, attempts.map((a) => h("tr", {},
      h("td", {}, String(a.attempt)),
      h("td", {}, formatTime(a.at)),
      h("td", {}, badge(a.status != null ? `HTTP ${a.status}` : "no answer", a.outcome === "delivered" ? "good" : a.outcome === "retry" ? "warn" : "bad")),
      h("td", { class: "mono" }, `${Math.round(a.latency_ms)} ms`),
      h("td", {}, h("pre", { class: "wh-answer" }, a.error || a.response || ""))))));
}

function createForm(say, onCreated) {
  const url = h("input", { id: "wh-url", type: "url", required: true, placeholder: "https://example.org/mail-hook", autocomplete: "off" });
  const description = h("input", { id: "wh-description", placeholder: "optional", autocomplete: "off" });
  const all = h("input", { type: "checkbox", id: "wh-all", checked: true });
  const types = h("fieldset", { class: "wh-types", id: "wh-types" }, h("legend", {}, "Events"),
    h("label", { class: "inline" }, all, " Every event"));
  const boxes = [];
  webhooksApi.eventTypes().then((known) => {
    for (const type of known.event_types || []) {
      const box = h("input", { type: "checkbox", value: type, disabled: true });
      boxes.push(box);
      types.appendChild(h("label", { class: "inline" }, box, " ", type));
    }
  }).catch(() => {});
  all.addEventListener("change", () => boxes.forEach((b) => { b.disabled = all.checked; }));
  const submit = h("button", { type: "submit", class: "btn btn-primary", id: "wh-submit" }, "Create webhook");
  const form = h("form", { class: "reg-form", id: "wh-form" }, h("h2", {}, "New webhook"),
    h("label", { for: "wh-url" }, "URL"), url,
    types,
    h("label", { for: "wh-description" }, "Description"), description,
    submit);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const events = all.checked ? ["*"] : boxes.filter((b) => b.checked).map((b) => b.value);
    if (!events.length) {
      say("Pick at least one event, or every event.", true);
      return;
    }
    submit.disabled = true;
    try {
      const body = { url: url.value.trim(), events };
      if (description.value.trim()) body.description = description.value.trim();
      const made = await webhooksApi.create(body);
      form.reset();
      boxes.forEach((b) => { b.disabled = true; });
      onCreated(made);
    } catch (error) {
      say(`Could not create the webhook: ${describeError(error)}`, true);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}
