// The sign-in card. The key is kept in sessionStorage only (gone when the tab closes).

import { h } from "../dom.js";

export function render({ message, onSubmit }) {
  const input = h("input", {
    id: "api-key", name: "api-key", type: "password", autocomplete: "off", required: true,
    spellcheck: "false", placeholder: "paste an API key", "aria-describedby": "key-help",
  });
  const error = h("p", { class: "form-error", role: "alert", id: "signin-error" }, message || "");
  if (!message) error.hidden = true;
  const button = h("button", { type: "submit", class: "btn btn-primary" }, "Sign in");
  const form = h("form", { class: "signin-form", novalidate: true }, 
    h("label", { for: "api-key" }, "API key"),
    input,
    h("p", { class: "hint", id: "key-help" },
      "The key stays in this browser tab (sessionStorage) and is sent only in the Authorization header. ",
      "Create one with ", h("code", {}, "mail keys create"), "."),
    error,
    button);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const key = input.value.trim();
    if (!key) {
      error.textContent = "Enter an API key.";
      error.hidden = false;
      return;
    }
    button.disabled = true;
    button.textContent = "Signing in…";
    await onSubmit(key);
  });
  queueMicrotask(() => input.focus());
  return h("div", { class: "signin" },
    h("div", { class: "signin-card" },
      h("div", { class: "signin-brand" }, h("img", { src: "icon.svg", alt: "" }),
        h("div", {}, h("h1", {}, "MAIL console"), h("p", {}, "Multi-Agent Interface Layer"))),
      form));
}
