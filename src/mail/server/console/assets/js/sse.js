// A server-sent-events reader over fetch (EventSource cannot send an Authorization header,
// and the key must never travel in a URL). Handles CRLF and LF framing, multi-line data,
// comments and ids.

export async function readEventStream(response, onEvent, signal) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      if (signal && signal.aborted) break;
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const event = parseFrame(frame);
        if (event && onEvent(event) === false) return;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

export function parseFrame(frame) {
  let name = "message";
  let id = null;
  const data = [];
  for (const line of frame.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  }
  if (!data.length && name === "message") return null;
  const text = data.join("\n");
  let parsed = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // keep the raw text
  }
  return { event: name, id, data: parsed };
}
