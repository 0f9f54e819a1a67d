"""Example supervisor: the entrypoint that delegates to workers and completes tasks."""
