"""Cluster mode: each caller's swarm instance lives in one named Ray actor."""

from mail.cluster.settings import ClusterUnavailable, apply_cluster_env, cluster_enabled

__all__ = ["ClusterUnavailable", "apply_cluster_env", "cluster_enabled"]
