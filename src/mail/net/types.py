"""Data shapes and the error type of the interswarm layer (registry + router)."""

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


# ---------------------------------------------------------------------------- HTTP answers
# The JSON bodies of the server's routes, under the names v1.3 gave them (its api.md names
# them `types.GetRootResponse` and so on). Fields this server adds are NotRequired.


class SwarmInfo(TypedDict):
    """``swarm`` in the answer of ``GET /``: the swarm this server serves."""

    name: str
    version: str
    description: str
    entrypoint: str
    keywords: list[str]
    public: bool


class SwarmStatus(TypedDict):
    """``swarm`` in the answer of ``GET /status``."""

    name: str | None
    status: str


class GetRootResponse(TypedDict):
    """``GET /``: the service, its protocol version and the swarm it serves."""

    name: str  # always "mail"
    protocol_version: str
    swarm: SwarmInfo
    status: str  # "running"
    uptime: float  # seconds
    version: NotRequired[str]  # the OpenAPI file's name of protocol_version


class GetWhoamiResponse(TypedDict):
    """``GET /whoami``: who the bearer token belongs to."""

    id: str
    role: str
    username: NotRequired[str]  # the OpenAPI file's name of id


class GetStatusResponse(TypedDict):
    """``GET /status``: the swarm and the caller's instance."""

    swarm: SwarmStatus
    active_users: int
    user_mail_ready: bool
    user_task_running: bool


class PostMessageResponse(TypedDict):
    """``POST /message`` (not streamed): the final answer's body, and the events when
    ``show_events`` was asked for (each a dict with ``event``, ``id`` and ``data``)."""

    response: str
    events: list[dict[str, Any]] | None
    task_id: NotRequired[str]  # to continue the task in a next request
    state: NotRequired[str]  # the task's state: "completed", "failed" (an error), a pause


class GetHealthResponse(TypedDict):
    """``GET /health``."""

    status: str
    swarm_name: str
    timestamp: str


class GetSwarmsResponse(TypedDict):
    """``GET /swarms``: the public swarms this server knows."""

    swarms: list[SwarmEndpointCleaned]


class PostSwarmsResponse(TypedDict):
    """``POST /swarms``: a swarm was registered."""

    status: str
    swarm_name: str


class GetSwarmsDumpResponse(TypedDict):
    """``GET /swarms/dump``."""

    status: str
    swarm_name: str


class PostSwarmsLoadResponse(TypedDict):
    """``POST /swarms/load``: the swarm that is served from now on."""

    status: str
    swarm_name: str


class PostInterswarmMessageResponse(TypedDict):
    """``POST /interswarm/message``: the remote task's final message, and its events."""

    response: dict[str, Any]  # a MAILMessage
    events: list[dict[str, Any]] | None


class PostInterswarmForwardResponse(TypedDict):
    """``POST /interswarm/forward``: the envelope was taken."""

    swarm: str
    task_id: str
    status: str
    local_runner: str  # role:id@swarm of the instance that runs the task here


# /interswarm/back answers with the same shape as /interswarm/forward.
PostInterswarmBackResponse = PostInterswarmForwardResponse


class InterswarmError(Exception):
    """Sending to, or registering, a remote swarm failed (`str()` is fit for the agent).

    `swarm_name`, `status`, `transient` (no answer, or "try again") and `retry_after` are set
    when known.
    """

    def __init__(
        self,
        message: str,
        *,
        swarm_name: str | None = None,
        status: int | None = None,
        transient: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.swarm_name = swarm_name
        self.status = status
        self.transient = transient
        self.retry_after = retry_after

    def __str__(self) -> str:
        return self.message
