"""The effective ``[server.cluster]`` table: mail.toml, then environment, then CLI flags."""

from __future__ import annotations

import os
from typing import Any

CLUSTER_ENV = {
    "backend": "MAIL_CLUSTER_BACKEND",
    "address": "MAIL_CLUSTER_ADDRESS",
    "namespace": "MAIL_CLUSTER_NAMESPACE",
    "public_url": "MAIL_CLUSTER_PUBLIC_URL",
}


class ClusterUnavailable(RuntimeError):
    """Cluster mode was asked for but cannot run (missing extra, no database, no cluster)."""


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


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ClusterUnavailable(
            "cluster mode needs Ray: install the extra with `uv sync --extra cluster` "
            "(or `pip install 'mail[cluster]'`)"
        ) from None
    return ray
