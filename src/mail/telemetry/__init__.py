"""Observability: token and cost accounting, budgets, OpenTelemetry traces, Prometheus metrics.

Modules: `usage` (what model calls cost, added up per task), `budget` (per-task limits),
`meter` (the runtime's hooks), `model_calls` (measuring one call), `tracing` (OTel setup and
W3C propagation), `metrics` (Prometheus), `http` (ASGI middleware), `settings`
(``[server.telemetry]``).
"""
