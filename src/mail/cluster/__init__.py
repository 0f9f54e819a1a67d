"""Cluster mode: each caller's swarm instance lives in one named Ray actor.

The default server keeps every instance in its own process (``[server.cluster] backend =
"none"``). With ``backend = "ray"`` the process is a *front end*: it terminates HTTP,
authenticates the caller and forwards the request to the caller's *instance host* — a Ray
actor, one per (swarm, role, id) cluster-wide — which runs the runtime and answers with the
same routes, bodies, status codes and SSE events as a single process. See docs/cluster.md.

Modules:

- ``settings``: the effective ``[server.cluster]`` (file, environment, flags).
- ``host``: :class:`InstanceHost`, what runs inside an actor (no Ray import; testable alone).
- ``ray_backend``: the Ray actor around a host and the front end's client of those actors.
- ``forwarding``: the front end's routes that hand requests to the backend.

Ray is an optional dependency (``uv sync --extra cluster``); nothing here imports it unless
cluster mode is switched on.
"""

from mail.cluster.settings import ClusterUnavailable, apply_cluster_env, cluster_enabled

__all__ = ["ClusterUnavailable", "apply_cluster_env", "cluster_enabled"]
