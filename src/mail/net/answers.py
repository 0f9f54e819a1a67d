"""Reading a remote swarm's HTTP answers without trusting their size."""

from __future__ import annotations

import aiohttp

# A successful answer to an interswarm POST (an acknowledgement, or the task answer of
# POST /interswarm/message with its events); larger answers are refused.
MAX_PEER_ANSWER_BYTES = 32 * 1024 * 1024
# An error answer: only its first characters are shown (router.peer_error_text), so only the
# start is read.
MAX_PEER_ERROR_BYTES = 64 * 1024
# `GET /health` and `GET /` of a peer: a small JSON object.
MAX_PEER_INFO_BYTES = 1024 * 1024
# A discovery endpoint's `GET /swarms` list (thousands of entries fit).
MAX_SWARM_LIST_BYTES = 4 * 1024 * 1024

_CHUNK = 64 * 1024


class AnswerTooLarge(Exception):
    """The answer went on past the cap (the text names the cap)."""


async def read_at_most(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """The first `limit` bytes of the body, and whether more followed (then not read)."""
    data = bytearray()
    while len(data) <= limit:
        chunk = await response.content.read(min(_CHUNK, limit + 1 - len(data)))
        if not chunk:
            return bytes(data), False
        data.extend(chunk)
    return bytes(data[:limit]), True


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, or AnswerTooLarge once it passes `limit` bytes."""
    data, more = await read_at_most(response, limit)
    if more:
        raise AnswerTooLarge(f"the answer is over {limit} bytes")
    return data


def decode(data: bytes) -> str:
    """Peers answer JSON, which is UTF-8; a stray byte does not make the answer unreadable."""
    return data.decode("utf-8", errors="replace")
