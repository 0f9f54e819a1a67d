// The /webhooks calls of the console (docs/webhooks.md), over the one request function of
// api.js: the key goes in the Authorization header, never in a URL.

import { request } from "./api.js";

const path = (id, rest = "") => `/webhooks/${encodeURIComponent(id)}${rest}`;

export const webhooksApi = {
  eventTypes: () => request("GET", "/webhooks/event-types"),
  list: () => request("GET", "/webhooks"),
  create: (body) => request("POST", "/webhooks", body),
  update: (id, body) => request("PATCH", path(id), body),
  remove: (id) => request("DELETE", path(id)).catch((error) => {
    // 204 has no body: the JSON parse of an empty answer is not an error here.
    if (error instanceof SyntaxError) return null;
    throw error;
  }),
  test: (id) => request("POST", path(id, "/test")),
  rotate: (id, overlapSeconds) => request("POST", path(id, "/rotate-secret"), { overlap_seconds: overlapSeconds }),
  deliveries: (id, status) => request("GET", path(id, `/deliveries?limit=50${status ? `&status=${encodeURIComponent(status)}` : ""}`)),
  retry: (id, deliveryId) => request("POST", path(id, `/deliveries/${encodeURIComponent(deliveryId)}/retry`)),
};
