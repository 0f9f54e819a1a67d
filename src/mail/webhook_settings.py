"""``[server.webhooks]``: push delivery of task events (signed webhooks, A2A push notifications)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Seconds to wait before each retry: after the first attempt fails the next one comes 5 s
# later, and so on; the last retry comes about 23.7 hours after the event (11 attempts).
DEFAULT_RETRY_SCHEDULE: tuple[float, ...] = (
    5,
    30,
    120,
    600,
    1800,
    3600,
    7200,
    14400,
    28800,
    28800,
)


class WebhooksConfig(BaseModel):
    """``[server.webhooks]``."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, validate_assignment=True)

    # Off: no events are recorded for delivery and /webhooks answers 404.
    enabled: bool = True
    # The address guard (the same as [stdlib.net]'s, with its own exceptions): webhook URLs
    # that resolve to loopback, private, link-local (cloud metadata), multicast or other
    # non-public addresses are refused unless their host, address or network is listed here.
    allowed_hosts: list[str] = Field(default_factory=list)
    allow_private_addresses: bool = False
    # Proxies from HTTP_PROXY / HTTPS_PROXY / NO_PROXY (the target is still checked here).
    trust_env: bool = True
    # One attempt: seconds to connect, and in all (request sent and answer read).
    connect_timeout: float = Field(default=5.0, gt=0)
    timeout: float = Field(default=15.0, gt=0)
    # Bytes of a receiver's answer read (and kept in the delivery log); the rest is ignored.
    max_response_bytes: int = Field(default=2048, ge=0, le=65536)
    # Seconds before each retry (see DEFAULT_RETRY_SCHEDULE); its length is the number of
    # retries. Each delay is spread by +-retry_jitter of itself.
    retry_schedule: list[float] = Field(default_factory=lambda: list(DEFAULT_RETRY_SCHEDULE))
    retry_jitter: float = Field(default=0.2, ge=0, le=1)
    # A receiver's Retry-After is honoured up to this many seconds.
    max_retry_after: float = Field(default=86400.0, gt=0)
    # A subscription whose deliveries all failed for this long is disabled (with a notice).
    disable_after: float = Field(default=86400.0, gt=0)
    # Attempts under way at once in one server process, towards one host:port, and of one
    # caller (their share: deliveries are claimed taking turns across callers, so one
    # caller's slow or dead receivers hold this many slots at most).
    max_in_flight: int = Field(default=32, ge=1)
    max_in_flight_per_destination: int = Field(default=4, ge=1)
    max_in_flight_per_owner: int = Field(default=8, ge=1)
    # Slots of max_in_flight kept for callers with nothing under way (at most half of
    # them): a caller with an attempt under way starts another only while this many stay
    # free, so while fewer callers than this have attempts under way (hanging or not), a
    # caller with none gets a slot at once.
    max_in_flight_reserved: int = Field(default=16, ge=0)
    # Quotas: standing subscriptions per caller; per-request webhooks (POST /message) per
    # caller and per task (one per distinct URL: a later message naming the same URL uses
    # the same one); deliveries waiting per subscription and per caller in all (past either,
    # new deliveries are recorded as failed, saying so; a test or a retry is refused);
    # A2A push configs per task and per caller in all.
    max_subscriptions_per_caller: int = Field(default=20, ge=1)
    max_request_webhooks_per_caller: int = Field(default=1000, ge=1)
    max_request_webhooks_per_task: int = Field(default=10, ge=1)
    max_pending_deliveries: int = Field(default=1000, ge=1)
    max_pending_deliveries_per_caller: int = Field(default=5000, ge=1)
    max_push_configs_per_task: int = Field(default=10, ge=1)
    max_push_configs_per_caller: int = Field(default=1000, ge=1)
    # Characters of a task's answer or error kept in an event's `summary`.
    summary_chars: int = Field(default=2000, ge=0)
    max_url_chars: int = Field(default=2048, ge=16)
    max_description_chars: int = Field(default=500, ge=0)
    # Longest overlap after a secret rotation during which the old secret also signs.
    max_secret_overlap: float = Field(default=7 * 86400.0, ge=0)
    # Seconds between looks at the outbox for due retries and other servers' work (new
    # events are picked up at once in the process that recorded them).
    poll_interval: float = Field(default=1.0, gt=0)
    # Off on a cluster's instance hosts (set by the cluster itself): they deliver what their
    # own instances record, and leave retries and takeovers to the front ends' polling.
    poll: bool = True
    # Finished deliveries (and per-request / A2A subscriptions) are kept this long.
    retention: float = Field(default=7 * 86400.0, gt=0)

    @field_validator("retry_schedule")
    @classmethod
    def _non_negative(cls, value: list[float]) -> list[float]:
        if any(delay < 0 for delay in value):
            raise ValueError("retry_schedule delays must be >= 0 seconds")
        if len(value) > 50:
            raise ValueError("retry_schedule has at most 50 retries")
        return value

    @property
    def reserved_in_flight(self) -> int:
        """The slots kept for callers with nothing under way (at most half)."""
        return min(self.max_in_flight_reserved, self.max_in_flight // 2)

    @property
    def lease_seconds(self) -> float:
        """How long a claimed delivery stays with the server that claimed it: one attempt's
        time with margin. A server that died holding it loses it after this."""
        return self.timeout + self.connect_timeout + 5.0
