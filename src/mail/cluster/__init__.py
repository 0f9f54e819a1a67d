"""Cluster mode: each caller's swarm instance lives in one named Ray actor.

The default server keeps every instance in its own process (``[server.cluster] backend =
"none"``). With ``backend = "ray"`` the process is a *front end*: it terminates HTTP,
authenticates the caller and forwards the request to the caller's *instance host* — a Ray
actor, one per (swarm, role, id) cluster-wide — which runs the runtime and answers with the
same routes, bodies, status codes and SSE events as a single process. See docs/cluster.md.

Modules:

- ``settings``: the effective ``[server.cluster]`` (file, environment, flags).
- ``host``: :class:`InstanceHost`, what runs inside an actor (no Ray import; testable alone).
- ``actor``: the Ray actor around a host; ``ray_backend``: the front end's client of those
  actors; ``ray_connect``: reachability and token checks before joining a cluster.
- ``forwarding``: the front end's routes that hand requests to the backend.
- ``warm_pool``: pre-started instance hosts per node and the directory that hands them out
  (``[server.cluster] warm_pool``).

Ray is an optional dependency (``uv sync --extra cluster``); nothing here imports it unless
cluster mode is switched on.
"""

from mail.cluster.settings import ClusterUnavailable, apply_cluster_env, cluster_enabled

__all__ = ["ClusterUnavailable", "apply_cluster_env", "cluster_enabled"]
