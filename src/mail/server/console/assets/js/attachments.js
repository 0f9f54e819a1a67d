// Attachments (the team tools' files): finding them in events and posts, showing them with a
// download button, and reading files the user picks for POST /message.
//
// A download fetches GET /attachments/{id} with the key in the Authorization header (api.js),
// then saves the Blob through a short-lived blob: URL. The key never goes into a URL.

import { api } from "./api.js";
import { describeError, h, replace, svg } from "./dom.js";
import { messageOf } from "./model.js";

// The documented default of [server.team_tools] max_attachment_bytes. The server may be set
// lower (it answers 413 then); files over this are refused before they are read.
export const MAX_ATTACHMENT_BYTES = 10 * 1024 * 1024;

// Whole ids only: a truncated "att_1234..." in a shortened text is not offered.
const ATTACHMENT_ID = /\batt_[0-9a-f]{8,}\b(?!\.\.\.)/g;

export function formatSize(bytes) {
  const n = Number(bytes);
  if (!Number.isFinite(n)) return "";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MiB`;
}

// Attachments an event carries: `attachment` events (a file sent with transfer_file) and
// messages whose routing_info lists attachments. Each {id, filename, size, sha256, description}.
export function attachmentsOf(ev) {
  if (ev.event === "attachment" && ev.extra.attachment && ev.extra.attachment.id) {
    return [ev.extra.attachment];
  }
  const full = ev.extra.full_message;
  const routing = full && full.message && full.message.routing_info;
  const listed = routing && Array.isArray(routing.attachments) ? routing.attachments : [];
  return listed.filter((a) => a && typeof a.id === "string");
}

// Attachments named in a text (a thread post, a message body), without repeats: {id} plus the
// file name and size when the text lists it the way uploads are listed
// ("- brief.txt (attachment id att_…, 30 bytes)").
const LISTED = /^- (.+?) \(attachment id (att_[0-9a-f]+), (\d+) bytes\)/gm;

export function attachmentsNamedIn(text) {
  const body = String(text || "");
  const known = new Map();
  for (const m of body.matchAll(LISTED)) known.set(m[2], { filename: m[1], size: Number(m[3]) });
  return [...new Set(body.match(ATTACHMENT_ID) || [])].map((id) => ({ id, filename: id, ...known.get(id) }));
}

// A paperclip, drawn (an emoji needs a font the machine may not have).
export function clipIcon() {
  return svg("svg", { class: "attachment-icon", viewBox: "0 0 16 16", width: 14, height: 14, "aria-hidden": "true" },
    svg("path", { d: "M10.5 4.5v6a2.5 2.5 0 0 1-5 0V4a1.5 1.5 0 0 1 3 0v6a.5.5 0 0 1-1 0V5", fill: "none", stroke: "currentColor", "stroke-width": 1.4, "stroke-linecap": "round" }));
}

export function isUserMessage(ev) {
  const msg = messageOf(ev);
  return ev.event === "new_message" && msg && ["user", "admin"].includes(msg.sender.address_type);
}

function save(blob, filename) {
  const url = URL.createObjectURL(blob);
  const link = h("a", { href: url, download: filename, hidden: true });
  document.body.appendChild(link);
  link.click();
  link.remove();
  // Give the browser time to start the download before the URL goes away.
  setTimeout(() => URL.revokeObjectURL(url), 30_000);
}

// One attachment: name, size, description, and (when it has an id) a download button.
export function attachmentItem(meta) {
  const status = h("span", { class: "attachment-status", role: "status" });
  const button = meta.id
    ? h("button", {
      type: "button", class: "btn btn-small attachment-download", dataset: { attachment: meta.id },
      title: `Download ${meta.filename || meta.id}`,
    }, "Download")
    : null;
  if (button) {
    button.addEventListener("click", async () => {
      button.disabled = true;
      status.className = "attachment-status";
      replace(status, "Downloading…");
      try {
        const file = await api.attachment(meta.id);
        save(file.blob, file.filename || meta.filename || meta.id);
        replace(status);
      } catch (error) {
        status.className = "attachment-status attachment-error";
        replace(status, describeError(error));
      } finally {
        button.disabled = false;
      }
    });
  }
  return h("li", { class: "attachment", dataset: { attachment: meta.id || "" } },
    clipIcon(),
    h("span", { class: "attachment-name" }, meta.filename || meta.id),
    meta.size !== undefined ? h("span", { class: "muted attachment-size" }, formatSize(meta.size)) : null,
    meta.description ? h("span", { class: "muted attachment-description" }, meta.description) : null,
    button, status);
}

export function attachmentList(metas) {
  if (!metas || !metas.length) return null;
  return h("ul", { class: "attachments", "aria-label": "Attachments" }, metas.map(attachmentItem));
}

function readAsBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => {
      const url = String(reader.result || "");
      resolve(url.slice(url.indexOf(",") + 1));
    };
    reader.onerror = () => reject(reader.error || new Error(`could not read ${file.name}`));
    reader.readAsDataURL(file);
  });
}

// The `attachments` entries of POST /message for the picked files. Throws (with a message for
// the user) when one is over the documented cap.
export async function readPicked(files) {
  const out = [];
  for (const file of files) {
    if (file.size > MAX_ATTACHMENT_BYTES) {
      throw new Error(`${file.name} is ${formatSize(file.size)}; attachments are limited to ${formatSize(MAX_ATTACHMENT_BYTES)}.`);
    }
    out.push({ filename: file.name, size: file.size, content_base64: await readAsBase64(file) });
  }
  return out;
}
