"""``[server]`` and its sub-tables (``mail.config.server``, where v1.3 kept ServerConfig)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from mail.config.base import _Section
from mail.telemetry.settings import TelemetryConfig
from mail.webhook_settings import WebhooksConfig


class SwarmConfig(_Section):
    """``[server.swarm]``: which swarm the server hosts and where its registry lives."""

    name: str = "demo"
    source: str = "swarms.json"
    registry_file: str = Field(default="registries/demo.json", alias="registry")
    description: str = ""
    keywords: list[str] = Field(default_factory=list)
    public: bool = False
    # Several processes use the registry file (cluster mode turns this on): each re-reads it
    # when it changed and changes it under a lock; volatile entries are kept in it too.
    registry_shared: bool = False

    @property
    def registry(self) -> str:
        return self.registry_file


class ServerSettings(_Section):
    """``[server.settings]``: runtime behaviour of the hosted swarm."""

    # Maximum number of counted messages per task before the runtime forces task_complete.
    # ``None`` (or 0 in the file) means unlimited.
    task_message_limit: int | None = Field(default=15, ge=0)
    print_llm_streams: bool = True
    # Seconds without a new event before an SSE stream sends an ``event: ping``.
    sse_ping_interval: float = Field(default=15.0, gt=0)
    # Seconds an instance may stay unused before it is shut down (0 disables reclaiming).
    instance_idle_timeout: float = Field(default=1800.0, ge=0)
    # Callers' instances loaded at start-up, one after another, to continue the tasks that
    # were running when the server stopped (a kill -9 too); the others' tasks continue at
    # their caller's next request. 0 = none (every one waits for its caller).
    resume_instances_at_start: int = Field(default=100, ge=0)
    # Default time a non-streaming POST /message waits for the task to finish.
    message_timeout: float = Field(default=3600.0, gt=0)
    # What a message to a task that is still running does when it names no
    # `multitask_strategy` (docs/api-http.md#a-message-to-a-running-task): reject (409),
    # enqueue, interrupt or rollback; and how many messages may wait (enqueue) behind one
    # task's current work (more: 429; 0 = no bound).
    multitask_strategy: Literal["reject", "enqueue", "interrupt", "rollback"] = "reject"
    max_enqueued_messages_per_task: int = Field(default=100, ge=0)
    # Freeze start-up objects out of the cyclic GC and collect young objects less often;
    # keeps full-collection pauses (which grow with the number of retained tasks) rare.
    gc_tuning: bool = True
    # Seconds one interswarm HTTP request may take before the sending agent is told it failed.
    interswarm_timeout: float = Field(default=30.0, gt=0)
    # Times an interswarm request is sent again (same Idempotency-Key, within
    # interswarm_timeout) when it got no answer or a 502/503/504 (429/409 with Retry-After).
    interswarm_retries: int = Field(default=2, ge=0, le=20)
    # Peers' answers kept per task while its owner's instance is not loaded (after a restart,
    # until the owner's next request); more are 503 + Retry-After.
    max_parked_answers_per_task: int = Field(default=100, ge=1)
    # ... and their bytes (as JSON); one answer bigger than this is 413.
    max_parked_bytes_per_task: int = Field(default=8 * 1024 * 1024, ge=1024)
    # Seconds between health checks of registered remote swarms.
    health_check_interval: float = Field(default=30.0, gt=0)
    # Agent turns one task may take (each run of it) before it is stopped with a
    # ::task_error::; unlike task_message_limit this counts system notices too. 0 = no bound.
    task_turn_limit: int | None = Field(default=500, ge=0)
    # The same failing tool call (same tool and arguments) this many times in a row by one
    # agent stops the task with a ::task_error::. 0 = never.
    task_repeat_limit: int | None = Field(default=5, ge=0)
    # Model answers in a row by one agent without a valid tool call (plain text, nothing,
    # not the tool the turn required) that stop the task with a ::task_error::. 0 = never.
    task_no_tool_call_limit: int | None = Field(default=3, ge=0)
    # Bytes of SSE frames one stream may hold for a client that reads slower than the task
    # produces events. When the buffer stays full for `sse_slow_reader_timeout` seconds the
    # stream ends with `event: resubscribe` (continue with GET /task/events).
    sse_max_buffer_bytes: int = Field(default=1_048_576, ge=1024)
    sse_slow_reader_timeout: float = Field(default=10.0, gt=0)
    # Seconds a client may take to send a request head, from the connection's start or the
    # end of the previous response on a kept-alive one: a started head is then answered 408,
    # an idle connection closed (under the bounded httptools protocol; docs/security.md).
    request_head_timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    # Seconds a client may take to send a request body once its head is complete, plus one
    # for each 500 bytes received (408 unless a response began; docs/security.md).
    request_body_timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    # HTTP connections one server process keeps open at once (event streams included); a new
    # one past it is answered 503 and closed. At most half the open-file limit (ulimit -n),
    # so that the process keeps descriptors for its own files and calls (0 = no bound).
    max_connections: int = Field(default=10_000, ge=0)
    # Largest request body, in bytes, any route accepts (413 above it; 0 = no limit).
    max_request_body: int = Field(default=4 * 1024 * 1024, ge=0)
    # Largest message body, in characters, a caller or an agent may send (0 = no limit).
    max_message_body: int = Field(default=1024 * 1024, ge=0)
    # Largest subject, in characters, a caller may send (POST /message, /interswarm/message,
    # A2A's data-part subject; 413 above it; 0 = no limit).
    max_subject_chars: int = Field(default=1000, ge=0)
    # Event streams (POST /message stream, GET /task/events) one caller may hold open at
    # once; more are 429 with Retry-After (0 = no bound).
    max_event_streams_per_caller: int = Field(default=32, ge=0)
    # Tasks one caller may keep paused (at a breakpoint or waiting for a review) before a new
    # task is refused with 429 (0 = no bound).
    max_paused_tasks_per_caller: int = Field(default=100, ge=0)
    # A2A task records (GetTask, ListTasks, SubscribeToTask) kept per caller, in memory: past
    # either bound the caller's least recently updated records are forgotten (0 = no bound).
    max_a2a_tasks_per_caller: int = Field(default=1000, ge=0)
    max_a2a_task_bytes_per_caller: int = Field(default=32 * 1024 * 1024, ge=0)
    # Seconds an A2A task left waiting for input (input-required) keeps its in-memory
    # machinery; then it is released (its record stays, and an answer picks it up again).
    a2a_interrupted_task_timeout: float = Field(default=60.0, gt=0)
    # Updates of an A2A peer shown, while it works, as events of the task that called it: per
    # call, and characters kept of each string of the peer's (an update's text, ids and names,
    # its error or failure text in an interswarm error) (0 = none shown / no text).
    max_a2a_peer_updates: int = Field(default=100, ge=0)
    max_a2a_peer_update_chars: int = Field(default=2000, ge=0)
    # Shape of one A2A request (POST /a2a, /a2a/...), checked before the SDK reads it: parts
    # of its message, and JSON values in the whole request (every array item and object
    # member, at any depth: data parts, metadata). Over either: JSON-RPC invalid params
    # (0 = no bound).
    max_a2a_message_parts: int = Field(default=100, ge=0)
    max_a2a_json_values: int = Field(default=10_000, ge=0)
    # Signed Agent Card (docs/a2a.md#signed-agent-cards): a PEM file holding an unencrypted
    # private key (EC P-256/P-384/P-521, RSA of 2048 bits or more, Ed25519), read at
    # startup; the card then carries a JWS over its canonical form, with `kid` (by default
    # the public key's RFC 7638 thumbprint) and, when set, `jku`. Empty: the card is unsigned.
    a2a_card_signing_key: str = ""
    a2a_card_signing_kid: str = ""
    a2a_card_signing_jku: str = ""
    # Shape of an interswarm envelope (POST /interswarm/forward, /back) and of a caller's
    # POST /interswarm/message, checked before anything else reads it: entries of an address
    # list (task_contributors, recipients, recipient_swarms, targets), characters of one
    # address or swarm name, JSON values in the whole body and how deep arrays and objects
    # nest in it. Over any: 400 naming the setting (0 = no bound).
    max_interswarm_addresses: int = Field(default=1000, ge=0)
    max_address_chars: int = Field(default=512, ge=0)
    max_interswarm_json_values: int = Field(default=10_000, ge=0)
    max_interswarm_json_depth: int = Field(default=32, ge=0)
    # Idempotency-Key (docs/api-http.md#idempotency-keys): seconds a key and the outcome of
    # its request are kept; live keys one caller may hold (more: 429; 0 = no bound); the
    # longest key accepted (longer: 400). At most 2048: PostgreSQL indexes the key with the
    # caller's scope in one b-tree entry, which may not pass 2704 bytes.
    idempotency_key_ttl: float = Field(default=86400.0, gt=0, allow_inf_nan=False)
    # Seconds after which a key another process took, whose request never finished (its
    # process died), is taken over by a retry (routes answered from their key's outcome).
    idempotency_takeover_after: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    max_idempotency_keys_per_caller: int = Field(default=10_000, ge=0)
    max_idempotency_key_length: int = Field(default=255, ge=1, le=2048)

    @field_validator(
        "task_message_limit",
        "task_turn_limit",
        "task_repeat_limit",
        "task_no_tool_call_limit",
        mode="before",
    )
    @classmethod
    def _zero_means_unlimited(cls, value: Any) -> Any:
        if value in (0, "0", "", "none", "None"):
            return None
        return value


class AuthConfig(_Section):
    """``[server.auth]``: how bearer keys are checked.

    ``mode = "auto"`` uses the external auth service when both ``AUTH_ENDPOINT`` and
    ``TOKEN_INFO_ENDPOINT`` are set in the environment, and the local key file otherwise.
    """

    mode: Literal["auto", "local", "external"] = "auto"
    # Local mode: where hashed keys are kept. Empty = ``keys.json`` next to the registry file.
    keys_file: str = ""
    # External mode: seconds a successful lookup of one key is reused.
    token_cache_ttl: float = Field(default=60.0, ge=0)
    # External mode: timeout of each round trip to the auth service.
    request_timeout: float = Field(default=10.0, gt=0)


class TeamToolsConfig(_Section):
    """``[server.team_tools]``: limits and folders of the opt-in team tools."""

    # Default and maximum wait of send_request(wait_for_reply=true), in seconds.
    reply_timeout: float = Field(default=120.0, gt=0)
    reply_timeout_max: float = Field(default=600.0, gt=0)
    # Largest attachment (agent transfer_file or user upload on POST /message), in bytes.
    max_attachment_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    # Largest attachment read_attachment returns as text, in bytes.
    max_read_bytes: int = Field(default=256 * 1024, gt=0)
    # Agents' working folders (one sub-folder per instance). Empty = the instance's folder
    # of the ``[stdlib.fs]`` root, the same one the mail.stdlib file actions use.
    files_root: str = ""
    # Unused (older configs still load): every store keeps attachment bytes in its database,
    # the memory store in its in-memory one.
    attachments_dir: str = ""
    # Sizes of what agents and callers hand to the team tools (a thread post or an initial
    # message is bounded by [server.settings] max_message_body).
    max_title_chars: int = Field(default=200, gt=0)
    max_description_chars: int = Field(default=2000, gt=0)
    max_filename_chars: int = Field(default=255, gt=0)
    # Quotas per instance (one caller's swarm). Threads and attachment bytes are refused past
    # the quota; stored posts per thread and inbox entries per agent keep the newest ones.
    max_threads: int = Field(default=1000, gt=0)
    max_attachment_bytes_per_instance: int = Field(default=1024 * 1024 * 1024, gt=0)
    max_posts_per_thread: int = Field(default=10_000, gt=0)
    max_inbox_entries: int = Field(default=10_000, gt=0)


class CronsConfig(_Section):
    """``[server.crons]``: scheduled tasks (``/crons``, docs/crons.md)."""

    # Off: /crons answers 404 and no scheduled task runs on this server.
    enabled: bool = True
    # Scheduled tasks one caller may have.
    max_crons_per_caller: int = Field(default=20, ge=1)
    # Shortest time between two runs of one schedule, in seconds (a schedule whose runs come
    # closer is refused). Six-field schedules (seconds first) need it at 1.
    min_interval: float = Field(default=60.0, gt=0)
    # After a server was down at a scheduled time: the latest missed time still runs (once)
    # when it is at most this many seconds old; older missed times are skipped.
    catch_up_window: float = Field(default=3600.0, ge=0)
    # Bytes of a scheduled task's message (its JSON).
    max_message_bytes: int = Field(default=65536, ge=64)
    max_description_chars: int = Field(default=500, ge=0)
    # Seconds between two reads of every schedule (changes made through another front end
    # sharing the database); between them the scheduler sleeps until its nearest run.
    rescan_interval: float = Field(default=30.0, gt=0)


class McpConfig(_Section):
    """``[server.mcp]``: the MCP endpoint ``/mcp`` where outside agents join (docs/mcp.md)."""

    enabled: bool = True
    # External agents one caller's instance may have joined at once.
    max_agents_per_instance: int = Field(default=16, gt=0)
    # Cap on the timeout of wait_for_messages / wait_for_reply / post_message(wait), seconds.
    max_wait_seconds: float = Field(default=300.0, gt=0)
    # Open MCP sessions of the whole server, and seconds an idle session is kept.
    max_sessions: int = Field(default=1000, gt=0)
    # Open MCP sessions of one caller (key): past it the caller's idlest session is ended,
    # or the new one refused (429) while all are in use. At the server's limit an idle
    # session of whoever holds the most is ended first.
    max_sessions_per_caller: int = Field(default=32, gt=0)
    session_idle_timeout: float = Field(default=1800.0, gt=0)
    # Long-polls (wait_for_messages / wait_for_reply) one outside agent may run at once.
    max_waits_per_agent: int = Field(default=4, gt=0)
    # Characters of the subject of a message an outside agent sends.
    max_subject_chars: int = Field(default=1000, gt=0)
    # Bytes of one answer to a tool call or resource read (the JSON-RPC message). The
    # mcp SDK's client refuses a server-sent event over 1 MiB; message lists hold as many
    # whole messages as fit, a longer body is cut and read on with read_message.
    max_reply_bytes: int = Field(default=512 * 1024, ge=4096)
    # Characters of a resource URI a client sends (resources/read, subscribe); longer ones
    # are refused before they are matched or echoed in an error.
    max_uri_chars: int = Field(default=2048, ge=64)


class ClusterConfig(_Section):
    """``[server.cluster]``: where instances live when there is more than one process.

    ``backend = "none"`` (the default) keeps every instance in this process. ``"ray"`` puts
    each instance in a named Ray actor (needs the ``cluster`` extra and ``DATABASE_URL``);
    see docs/cluster.md. ``MAIL_CLUSTER_BACKEND``, ``MAIL_CLUSTER_ADDRESS`` and
    ``MAIL_CLUSTER_NAMESPACE``, ``MAIL_CLUSTER_PUBLIC_URL`` and ``MAIL_CLUSTER_WARM_POOL``
    override the file.
    """

    backend: Literal["none", "ray"] = "none"
    # "auto" joins the Ray cluster of this machine (``ray start``); "ray://host:10001" a
    # remote one through Ray Client; "local" starts a private single-node cluster.
    address: str = "auto"
    # Ray namespace of the instance actors: front ends of one deployment share it.
    namespace: str = "mail"
    # Seconds a front end lets open requests and streams finish on SIGTERM.
    drain_timeout: float = Field(default=30.0, ge=0)
    # The deployment's URL as others reach it (its load balancer): what the registry and
    # interswarm messages announce instead of each front end's own host:port.
    public_url: str = ""
    # Instance hosts kept started per worker node (imports done, database pool open), ready
    # to adopt a new caller's instance or one whose node died; 0 starts each host on demand.
    # Off by default: with no warm host left, a dead host's instance came back on a cold host
    # without running its tasks again (docs/cluster.md, "Limits").
    warm_pool: int = Field(default=0, ge=0, le=8)


# ``MAIL_CLUSTER_*`` variables over ``[server.cluster]`` keys (mail.toml, then these, then flags).
CLUSTER_ENV = {
    "backend": "MAIL_CLUSTER_BACKEND",
    "address": "MAIL_CLUSTER_ADDRESS",
    "namespace": "MAIL_CLUSTER_NAMESPACE",
    "public_url": "MAIL_CLUSTER_PUBLIC_URL",
    "warm_pool": "MAIL_CLUSTER_WARM_POOL",
}


def apply_cluster_env(table: dict[str, Any]) -> dict[str, Any]:
    """Override the keys of a ``[server.cluster]`` dict from ``MAIL_CLUSTER_*`` variables."""
    for key, var in CLUSTER_ENV.items():
        value = os.environ.get(var)
        if value:
            table[key] = value.strip()
    return table


def cluster_enabled(config: Any) -> bool:
    cluster = getattr(config, "cluster", None)
    return cluster is not None and cluster.backend != "none"


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """Seconds of a duration written as a number or with a unit: "45s", "90m", "12h", "30d",
    "2w" (as [server.store] finished_task_ttl takes them)."""
    raw = text.strip().lower()
    unit = _DURATION_UNITS.get(raw[-1:]) if raw else None
    number = raw[:-1] if unit is not None else raw
    try:
        value = float(number.strip())
    except ValueError:
        raise ValueError(
            f"'{text}' is not a duration (seconds, or a number with s, m, h, d or w: '30d')"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"'{text}' is not a duration: it must be a finite number, 0 or more")
    return value * (unit or 1.0)


class StoreConfig(_Section):
    """``[server.store]``: where the server keeps tasks, histories, threads and attachments.

    ``kind = "sqlite"`` (the default) keeps them in one SQLite file, ``path`` (empty:
    ``data/mail.db`` next to the registry's folder); ``"memory"`` keeps nothing across a
    restart; ``"postgres"`` uses ``DATABASE_URL`` (required then). ``DATABASE_URL`` set in
    the environment or ./.env selects PostgreSQL for ``"sqlite"`` too; ``"memory"`` ignores it.
    ``mail server --store`` overrides ``kind``. See docs/database.md.
    """

    kind: Literal["sqlite", "memory", "postgres"] = "sqlite"
    path: str = ""
    # Seconds `mail server` spends at start checking an existing SQLite file for damage
    # (PRAGMA quick_check); a larger file is checked that far and said so. 0 = no check.
    integrity_check_seconds: float = Field(default=5.0, ge=0)
    # Seconds a finished task is kept after its last change; then it is removed in the
    # background (threads, posts, inbox entries and attachments by their own age). A number
    # or text such as "30d", "12h", "90m", "45s". 0 keeps everything.
    finished_task_ttl: float = Field(default=30 * 86400.0, ge=0)
    # Seconds between background retention rounds (each removes what expired, in batches).
    prune_interval: float = Field(default=60.0, gt=0)
    # What one caller may keep stored: bytes of task data (events, histories, answers,
    # queues, team posts and attachments) and tasks. A new message past either is refused
    # with 429. 0 = no bound.
    max_stored_bytes_per_caller: int = Field(default=1024 * 1024 * 1024, ge=0)
    max_stored_tasks_per_caller: int = Field(default=10_000, ge=0)
    # Writes the task store holds in memory while the database does not take them (an
    # outage, a full disk). At the bound new tasks are refused with 503 and agents' next
    # turns wait until the database takes writes again.
    max_pending_writes: int = Field(default=100_000, ge=1)

    @field_validator("finished_task_ttl", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):  # TOML's inf (nan: ge=0)
            raise ValueError(f"{value} is not a duration: it must be a finite number, 0 or more")
        return parse_duration(value) if isinstance(value, str) else value

    def database_path(self, registry_file: str) -> Path:
        """The SQLite file: ``path``, or ``data/mail.db`` beside the registry's folder."""
        if self.path:
            return Path(self.path).expanduser()
        return Path(registry_file).parent.parent / "data" / "mail.db"


class ServerConfig(_Section):
    """``[server]`` and its sub-tables."""

    port: int = Field(default=8000, ge=0, le=65535)
    host: str = "0.0.0.0"
    reload: bool = False
    debug: bool = False
    # One log line per request (uvicorn's access log).
    access_log: bool = True
    log_level: str = "info"
    # The web console at /ui (static assets; every API call it makes needs a key).
    ui: bool = True
    swarm: SwarmConfig = Field(default_factory=SwarmConfig)
    settings: ServerSettings = Field(default_factory=ServerSettings)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    team_tools: TeamToolsConfig = Field(default_factory=TeamToolsConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    webhooks: WebhooksConfig = Field(default_factory=WebhooksConfig)
    crons: CronsConfig = Field(default_factory=CronsConfig)

    @property
    def base_url(self) -> str:
        """The URL other parties should use to reach this server (wildcard hosts → localhost)."""
        if self.cluster.public_url:
            return self.cluster.public_url.rstrip("/")
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "localhost"
        elif ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def keys_file_path(self) -> Path:
        """Resolved location of the local key file (``MAIL_KEYS_FILE`` wins over the config)."""
        env = os.environ.get("MAIL_KEYS_FILE")
        if env:
            return Path(env)
        if self.auth.keys_file:
            return Path(self.auth.keys_file)
        return Path(self.swarm.registry_file).parent / "keys.json"


# v1.3's name of the ``[server.settings]`` model.
SettingsConfig = ServerSettings
