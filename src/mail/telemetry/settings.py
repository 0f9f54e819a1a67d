"""``[server.telemetry]`` in mail.toml: budgets, the /metrics endpoint, span content."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TelemetryConfig(BaseModel):
    """Tracing itself is configured with the standard ``OTEL_*`` variables (see tracing.py)."""

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
