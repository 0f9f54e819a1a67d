"""``[server.telemetry]`` in mail.toml: budgets, the /metrics endpoint, span content."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, field_validator

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_sources(values: Iterable[str]) -> list[IpNetwork]:
    """Addresses and networks (``10.0.0.5``, ``10.0.0.0/8``, ``::1``); ``*`` means every
    address. ValueError names a value that is neither."""
    networks: list[IpNetwork] = []
    for value in values:
        text = str(value).strip()
        if text == "*":
            networks += [ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")]
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                f"trusted trace source '{text}' is not an IP address or network"
            ) from None
    return networks


class TelemetryConfig(BaseModel):
    """Tracing itself is configured with the standard ``OTEL_*`` variables (docs/observability.md)."""

    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    # Default per-task budgets (0 = none); kwargs.max_tokens_total / kwargs.max_cost override.
    max_tokens_total: int = Field(default=0, ge=0)
    max_cost: float = Field(default=0.0, ge=0)
    # Record Prometheus metrics and serve them at GET /metrics (admin key).
    metrics: bool = True
    # Also serve them without a key on this port (0 = not), bound to metrics_host.
    metrics_port: int = Field(default=0, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    # Put prompts, replies and tool arguments on spans (off: only names, sizes and numbers).
    capture_content: bool = False
    # Client addresses or networks (proxies, peers) whose incoming `traceparent` a request
    # continues; "*" = everyone. From others a request starts its own trace and links to
    # the caller's. Interswarm peers (agent keys on /interswarm/forward and /back) are
    # trusted whatever this says.
    trusted_trace_sources: list[str] = Field(default_factory=list)

    @field_validator("trusted_trace_sources")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        parse_sources(value)  # ValueError names a bad entry
        return value
