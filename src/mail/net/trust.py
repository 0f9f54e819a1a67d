"""Who may put what into which task over /interswarm/forward and /interswarm/back.

Pure functions (no I/O) so the rules can be read, and tested, in one place:

* the caller: an envelope never claims to come from this swarm; a key bound to a swarm
  (`mail keys create --role agent --swarm NAME`) only speaks for that swarm; a registry entry
  that names the caller identity of a peer (`caller_id`) only accepts calls carrying it;
* a new task: only the swarm that owns it may start it here (`task_owner` is `...@source`);
* an existing task: only its owner's swarm, or a swarm this server forwarded the task to
  (recorded in the task's `remote_swarms`), may add to it. Anyone else gets a 404, so a
  peer cannot even learn that a task exists.
"""

from __future__ import annotations

from collections.abc import Iterable

from mail.core.message import parse_task_contributor


class TrustError(Exception):
    """An interswarm envelope this server refuses; `status` is the HTTP status (403/404)."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


def owner_swarm(task_owner: str) -> str:
    """The swarm part of a `role:id@swarm` owner ('' when malformed)."""
    try:
        return parse_task_contributor(task_owner)[2]
    except ValueError:
        return ""


def check_caller(
    *,
    local_swarm: str,
    source_swarm: str,
    caller_id: str,
    bound_swarm: str | None,
    expected_caller_id: str | None,
) -> None:
    """Raise TrustError(403) unless this caller may send envelopes from `source_swarm`."""
    if source_swarm == local_swarm:
        raise TrustError(
            f"an envelope from another server cannot claim to come from this swarm "
            f"('{local_swarm}')"
        )
    if bound_swarm is not None and bound_swarm != source_swarm:
        raise TrustError(
            f"this key acts only for swarm '{bound_swarm}', not for source_swarm '{source_swarm}'"
        )
    if expected_caller_id is not None and caller_id != expected_caller_id:
        raise TrustError(
            f"calls for swarm '{source_swarm}' must be made with the identity its registry "
            f"entry names; caller '{caller_id}' is not it"
        )


def check_new_task(*, local_swarm: str, source_swarm: str, task_id: str, task_owner: str) -> None:
    """A task unknown here may only be started by the swarm that owns it."""
    owner = owner_swarm(task_owner)
    if owner == local_swarm:
        # Owned here but not known: nobody forwarded it, so the caller can't know of it.
        raise TrustError(f"task '{task_id}' is not known to this swarm", 404)
    if owner != source_swarm:
        raise TrustError(
            f"swarm '{source_swarm}' may only start tasks it owns; task '{task_id}' names "
            f"owner '{task_owner}'"
        )


def check_existing_task(
    *,
    source_swarm: str,
    task_id: str,
    task_owner: str,
    forwarded_to: Iterable[str],
) -> None:
    """Only the owner's swarm, or a swarm the task was forwarded to, may add to a task."""
    if source_swarm == owner_swarm(task_owner) or source_swarm in set(forwarded_to):
        return
    raise TrustError(f"task '{task_id}' is not known to this swarm", 404)
