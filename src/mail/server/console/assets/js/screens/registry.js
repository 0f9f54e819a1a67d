// Swarm registry (admins): every known swarm with its health, registering a remote swarm,
// removing one; plus this server's own health status.

import { api } from "../api.js";
import { badge, describeError, emptyState, errorState, h, loadingState, relativeTime, replace, statusLine } from "../dom.js";

export function render(container) {
  const body = h("div", {});
  const [message, say] = statusLine();
  const name = h("input", { id: "reg-name", required: true, placeholder: "meteo", autocomplete: "off" });
  const url = h("input", { id: "reg-url", required: true, type: "url", placeholder: "https://meteo.example.org", autocomplete: "off" });
  const token = h("input", { id: "reg-token", type: "password", placeholder: "optional", autocomplete: "off" });
  const volatile = h("input", { id: "reg-volatile", type: "checkbox" });
  const submit = h("button", { type: "submit", class: "btn btn-primary", id: "reg-submit" }, "Register");
  const form = h("form", { class: "reg-form", id: "reg-form" },
    h("h2", {}, "Register a swarm"),
    h("label", { for: "reg-name" }, "Name"), name,
    h("label", { for: "reg-url" }, "Base URL"), url,
    h("label", { for: "reg-token" }, "Auth token"), token,
    h("label", { class: "inline" }, volatile, " Volatile (forgotten at shutdown)"),
    submit);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    submit.disabled = true;
    try {
      const entry = { name: name.value.trim(), base_url: url.value.trim(), volatile: volatile.checked };
      if (token.value) entry.auth_token = token.value;
      await api.registerSwarm(entry);
      say(`Registered ${entry.name}.`);
      form.reset();
      load();
    } catch (error) {
      say(`Could not register: ${describeError(error)}`, true);
    } finally {
      submit.disabled = false;
    }
  });
  const health = h("div", { class: "server-health" });
  container.appendChild(h("div", { class: "registry-screen" },
    h("div", { class: "toolbar" }, h("h1", {}, "Swarm registry"),
      h("button", { type: "button", class: "btn btn-quiet", onclick: () => load() }, "Refresh")),
    message,
    h("div", { class: "registry-grid" }, h("section", {}, body), h("aside", {}, form, health))));

  let alive = true;
  const load = async () => {
    replace(body, loadingState("the registry"));
    try {
      const [reg, own] = await Promise.all([api.registry(), api.health()]);
      if (!alive) return;
      renderHealth(health, own, say, load);
      const swarms = reg.swarms || [];
      if (!swarms.length) {
        replace(body, emptyState("No swarms registered", "Register another MAIL server to let agents reach it."));
        return;
      }
      replace(body, h("table", { class: "table", id: "reg-table" },
        h("thead", {}, h("tr", {}, ["Swarm", "Health", "Base URL", "Seen", "Flags", ""].map((t) => h("th", {}, t)))),
        h("tbody", {}, swarms.map((s) => h("tr", { dataset: { swarm: s.swarm_name } },
          h("td", {}, h("strong", {}, s.swarm_name), h("div", { class: "muted" }, s.swarm_description || "")),
          h("td", {}, badge(s.is_active ? "up" : "down", s.is_active ? "good" : "bad"),
            s.latency != null ? h("span", { class: "muted" }, ` ${Math.round(s.latency * 1000)} ms`) : null),
          // One line, never broken inside the address; a long one ends in "…" (full in the title).
          h("td", {}, h("span", { class: "mono reg-url", title: s.base_url }, s.base_url)),
          h("td", { class: "muted" }, s.last_seen ? relativeTime(s.last_seen) : "never"),
          h("td", {}, s.is_local ? badge("this server", "info") : null, s.public ? badge("public", "plain") : null,
            s.volatile ? badge("volatile", "plain") : null),
          h("td", {}, s.is_local ? null : h("button", {
            type: "button", class: "btn btn-danger btn-small", dataset: { remove: s.swarm_name },
            onclick: async () => {
              if (!window.confirm(`Remove swarm ${s.swarm_name} from the registry?`)) return;
              try {
                await api.removeSwarm(s.swarm_name);
                say(`Removed ${s.swarm_name}.`);
              } catch (error) {
                say(`Could not remove: ${describeError(error)}`, true);
              }
              load();
            },
          }, "Remove")))))));
    } catch (error) {
      if (alive) replace(body, errorState("Could not load the registry", error, load));
    }
  };
  load();
  return () => { alive = false; };
}

function renderHealth(el, own, say, reload) {
  const select = h("select", { id: "health-status", "aria-label": "Server health" },
    ["healthy", "maintenance", "degraded"].map((s) => h("option", { value: s, selected: s === own.status }, s)));
  const form = h("form", { class: "reg-form" }, h("h2", {}, "This server"),
    h("p", {}, "Health: ", badge(own.status, own.status === "healthy" ? "good" : "warn")),
    h("label", { for: "health-status" }, "Set health"), select,
    h("button", { type: "submit", class: "btn" }, "Update"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await api.setHealth(select.value);
      say(`Health set to ${select.value}.`);
      reload();
    } catch (error) {
      say(`Could not set health: ${describeError(error)}`, true);
    }
  });
  replace(el, form);
}
