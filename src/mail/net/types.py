"""Data shapes and the error type of the interswarm layer (registry + router).

Endpoints are plain dicts (TypedDicts), like the rest of MAIL's data model, so code written
against the original (`endpoint["base_url"]`) keeps working.
"""

from __future__ import annotations

import datetime
from typing import Any, Literal, NotRequired, TypedDict

Direction = Literal["forward", "back"]


class SwarmEndpoint(TypedDict):
    """One swarm known to a registry (the local one included)."""

    swarm_name: str
    base_url: str
    version: str
    health_check_url: str
    # Where the bearer token for this swarm comes from: `${ENV_VAR}` for remotes, None for
    # the local swarm. Raw tokens are never stored here (see SwarmRegistry).
    auth_token_ref: str | None
    last_seen: datetime.datetime | None
    is_active: bool
    # Round-trip time of the last successful health check, in seconds.
    latency: float | None
    swarm_description: str
    keywords: list[str]
    metadata: dict[str, Any] | None
    public: bool
    volatile: bool
    # The caller id this peer's /interswarm calls must authenticate as (None: any agent
    # key; see mail.net.trust). Never shown by GET /swarms.
    caller_id: NotRequired[str | None]


class SwarmEndpointCleaned(TypedDict):
    """What `GET /swarms` shows about a swarm: no token refs, no `public`/`volatile` flags."""

    swarm_name: str
    base_url: str
    version: str
    last_seen: str | None
    is_active: bool
    latency: float | None
    swarm_description: str
    keywords: list[str]
    metadata: dict[str, Any] | None


class GetSwarmsResponse(TypedDict):
    swarms: list[SwarmEndpointCleaned]


class PostSwarmsResponse(TypedDict):
    status: str
    swarm_name: str


class PostInterswarmForwardResponse(TypedDict):
    swarm: str
    task_id: str
    status: str
    local_runner: str


# /interswarm/back answers with the same shape as /interswarm/forward.
PostInterswarmBackResponse = PostInterswarmForwardResponse


class InterswarmError(Exception):
    """Sending to, or registering, a remote swarm failed.

    `str(error)` is a short human-readable sentence suitable for a system message to the
    agent that tried to send. `swarm_name` and `status` (HTTP status of a non-2xx answer)
    are set when known.
    """

    def __init__(
        self,
        message: str,
        *,
        swarm_name: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.swarm_name = swarm_name
        self.status = status

    def __str__(self) -> str:
        return self.message
