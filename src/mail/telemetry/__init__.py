"""Observability: token and cost accounting, budgets, OpenTelemetry traces, Prometheus metrics."""
