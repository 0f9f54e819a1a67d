"""The effective ``[server.cluster]`` table: mail.toml, then environment, then CLI flags."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import sys
from typing import Any

# Defined with the [server.cluster] model (the server reads them without importing cluster/).
from mail.config import CLUSTER_ENV, apply_cluster_env, cluster_enabled


class ClusterUnavailable(RuntimeError):
    """Cluster mode was asked for but cannot run (missing extra, no database, no cluster)."""


# Ray reads these when it is imported (``ray._private.ray_constants``), so they are set before
# the first ``import ray`` of the process (``prepare_ray_environment``):
# - its `uv run` integration would make every worker re-create the front end's `uv run`
#   environment (and fail: VIRTUAL_ENV mismatch, no module named 'ray'); instance hosts run in
#   the Python environment the worker already has.
_UV_HOOK = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
# - with this off, Ray takes the loopback address as the node's address ("localhost" stays
#   127.0.0.1), so a private cluster's servers listen on loopback only.
_NODE_IP_FROM_NETWORK = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Token authentication of Ray's control plane (Ray >= 2.52): every node and driver of one
# cluster must agree on the mode and the token.
AUTH_MODE = "RAY_AUTH_MODE"
AUTH_TOKEN = "RAY_AUTH_TOKEN"
AUTH_TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"
# Where Ray looks for the token when neither variable is set (`ray get-auth-token --generate`).
DEFAULT_TOKEN_FILE = "~/.ray/auth_token"


def ray_token_available() -> bool:
    """Whether a Ray token is configured for this process (variable or Ray's default file)."""
    if os.environ.get(AUTH_TOKEN) or os.environ.get(AUTH_TOKEN_PATH):
        return True
    return os.path.isfile(os.path.expanduser(DEFAULT_TOKEN_FILE))


def gcs_refuses(
    address: str, metadata: tuple[tuple[str, str], ...] = (), timeout: float = 3.0
) -> bool | None:
    """Whether the GCS at ``host:port`` refuses one GetClusterId call carrying ``metadata``
    as unauthenticated: True (refused), False (answered), None when unknown (no answer, a
    ``ray://`` address, no Ray). Called with no metadata: whether the head requires a token."""
    if "://" in address or ":" not in address:
        return None
    try:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:
        return None
    try:
        with grpc.insecure_channel(address) as channel:
            stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
            request = gcs_service_pb2.GetClusterIdRequest()  # type: ignore[attr-defined]
            stub.GetClusterId(request, timeout=timeout, metadata=metadata)
    except grpc.RpcError as exc:
        return True if exc.code() == grpc.StatusCode.UNAUTHENTICATED else None
    except Exception:  # noqa: BLE001 - a probe only: Ray's own connection decides
        return None
    return False


def _auto_address() -> str | None:
    """The head ``auto`` stands for, as Ray finds it (``RAY_ADDRESS``, then the cluster this
    machine started last); None when there is none."""
    try:
        from ray._private.services import get_ray_address_from_environment

        found = get_ray_address_from_environment("auto", None)
        return str(found) if found and found != "auto" else None
    except Exception:  # noqa: BLE001 - not found: Ray's own connection reports it
        return None


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def prepare_ray_environment(address: str, host: str) -> dict[str, str]:
    """Set Ray's process-wide switches for this front end; returns what was set."""
    changed: dict[str, str] = {}

    def default(name: str, value: str) -> None:
        if name not in os.environ:
            os.environ[name] = changed[name] = value

    default(_UV_HOOK, "0")
    if address == "local":
        if is_loopback(host):
            default(_NODE_IP_FROM_NETWORK, "0")
        # A private cluster gets its own token (never the one in ~/.ray/auth_token that
        # another cluster of this machine may use), unless the operator chose a mode.
        if AUTH_MODE not in os.environ:
            os.environ[AUTH_MODE] = changed[AUTH_MODE] = "token"
            os.environ[AUTH_TOKEN] = changed[AUTH_TOKEN] = secrets.token_hex(32)
    elif AUTH_MODE not in os.environ and ray_token_available():
        # A shared cluster: present the token this machine has, as `ray start` does when it
        # finds one (head, workers and front ends configured alike), unless the head answers
        # without one: a front end in token mode refuses its own workers' calls back (the
        # items of a streamed answer never arrive) when they run without. A token file left
        # by another cluster of this machine must not switch it on. RAY_AUTH_MODE=disabled
        # keeps it off; a head that cannot be asked yet gets the token.
        probe = _auto_address() if address == "auto" else address
        mode = "disabled" if probe and gcs_refuses(probe) is False else "token"
        os.environ[AUTH_MODE] = changed[AUTH_MODE] = mode
    _refresh_imported_ray()
    return changed


def _refresh_imported_ray() -> None:
    """Make an already-imported Ray see the variables set above (best effort)."""
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is None:
        return
    constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = os.environ.get(_UV_HOOK, "1") not in ("0", "false")  # type: ignore[attr-defined]
    if os.environ.get(_NODE_IP_FROM_NETWORK) == "0":
        constants.ENABLE_RAY_CLUSTER = False  # type: ignore[attr-defined]
    raylet = sys.modules.get("ray._raylet")
    if raylet is not None and AUTH_MODE in os.environ:
        with contextlib.suppress(Exception):
            raylet.Config.initialize("")  # re-reads RAY_AUTH_MODE, as Ray itself does


def require_ray() -> Any:
    os.environ.setdefault(_UV_HOOK, "0")  # before the import: Ray reads it there
    try:
        import ray
    except ImportError:
        raise ClusterUnavailable(
            "cluster mode needs Ray: install the extra with `uv sync --extra cluster` "
            "(or `pip install 'mail[cluster]'`)"
        ) from None
    return ray


__all__ = [
    "CLUSTER_ENV",
    "ClusterUnavailable",
    "apply_cluster_env",
    "cluster_enabled",
    "is_loopback",
    "prepare_ray_environment",
    "require_ray",
]
