"""Reading a remote swarm's answer with its size counted while it is read.

Answers of other swarms (``GET /``, ``GET /swarms``, the health check, the answer to an
interswarm ``POST``) are read chunk by chunk, decompression included (aiohttp inflates each
chunk under its own bound), and refused once they pass ``PEER_ANSWER_LIMIT`` bytes: a peer
that answered ``GET /`` with 150 MB of gzipped JSON took the server from 71 to 546 MiB.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

PEER_ANSWER_LIMIT = 4 * 1024 * 1024  # bytes, after decompression
_CHUNK = 65536


class PeerAnswerTooLarge(ValueError):
    """A remote swarm's answer passed ``PEER_ANSWER_LIMIT`` (a ValueError, like bad JSON)."""


async def read_peer_answer(
    response: aiohttp.ClientResponse, limit: int = PEER_ANSWER_LIMIT
) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        size += len(chunk)
        if size > limit:
            response.close()
            raise PeerAnswerTooLarge(
                f"the answer is over {limit} bytes (the most read from a peer)"
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def peer_json(response: aiohttp.ClientResponse, limit: int = PEER_ANSWER_LIMIT) -> Any:
    """The answer parsed as JSON (ValueError when it is not JSON or too large)."""
    return json.loads(await read_peer_answer(response, limit))


async def peer_text(response: aiohttp.ClientResponse, limit: int = PEER_ANSWER_LIMIT) -> str:
    return (await read_peer_answer(response, limit)).decode(response.charset or "utf-8", "replace")


__all__ = ["PEER_ANSWER_LIMIT", "PeerAnswerTooLarge", "peer_json", "peer_text", "read_peer_answer"]
