"""Who may put what into which task over /interswarm/forward and /interswarm/back.

Pure functions. A key bound to a swarm speaks only for it; only a task's owner swarm starts it
here, and only the owner or a swarm we forwarded it to adds to it (others get 404). Senders
are re-attributed to the source swarm; a peer may send only the ``::task_complete::`` and
``::task_error::`` control subjects, and a contributor's notice never ends a task we own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from mail.core.message import owner_swarm, parse_agent_address, parse_task_contributor


class TrustError(Exception):
    """An interswarm envelope this server refuses; `status` is the HTTP status (403/404)."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


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


def peer_sender(sender: Any, *, source_swarm: str, task_owner: str) -> dict[str, str]:
    """The sender of a peer's envelope as this swarm sees it; TrustError(403) if it may not be."""
    kind = sender.get("address_type") if isinstance(sender, dict) else None
    address = sender.get("address") if isinstance(sender, dict) else None
    if not isinstance(address, str) or not address.strip():
        raise TrustError("the envelope's sender has no address")
    name, swarm = parse_agent_address(address)
    if swarm not in (None, "", source_swarm):
        raise TrustError(
            f"an envelope from swarm '{source_swarm}' speaks only for that swarm; its sender "
            f"'{address}' belongs to swarm '{swarm}'"
        )
    qualified = f"{name}@{source_swarm}"
    if kind == "agent":
        return {"address_type": "agent", "address": qualified}
    if kind in ("user", "admin"):
        try:
            role, ident, owner = parse_task_contributor(task_owner)
        except ValueError:
            role = ident = owner = ""
        if (role, ident, owner) == (kind, name, source_swarm):
            return {"address_type": kind, "address": qualified}
        raise TrustError(
            f"swarm '{source_swarm}' cannot send as a {kind} ('{address}'): a peer's envelope "
            f"carries its agents, or the peer's own {kind} who owns the task"
        )
    raise TrustError(
        f"swarm '{source_swarm}' cannot send as the {kind or 'unknown'} address '{address}': "
        "a peer's envelope carries only that peer's agents"
    )


PEER_CONTROL_SUBJECTS = frozenset({"::task_complete::", "::task_error::"})


def check_subject(subject: Any, *, source_swarm: str) -> None:
    """Raise TrustError(400) for a runtime control subject other than a task-end notice."""
    if (
        isinstance(subject, str)
        and subject.startswith("::")
        and subject not in PEER_CONTROL_SUBJECTS
    ):
        raise TrustError(
            f"swarm '{source_swarm}' cannot send the subject '{subject[:80]}': subjects starting "
            "with '::' are reserved for the runtime; a peer may send only "
            + " and ".join(sorted(PEER_CONTROL_SUBJECTS)),
            400,
        )


TaskEndEffect = Literal["end", "deliver"]


def task_end_effect(
    *,
    source_swarm: str,
    task_id: str,
    task_owner: str,
    owned_here: bool,
    to_local_agent: bool,
    to_direct_caller: bool,
) -> TaskEndEffect:
    """What a peer's `::task_complete::` / `::task_error::` notice does here."""
    if not owned_here and source_swarm == owner_swarm(task_owner):
        return "end"  # the owner says the task is over
    if to_local_agent:
        return "deliver"
    if owned_here and to_direct_caller:
        return "end"
    raise TrustError(
        f"swarm '{source_swarm}' contributes to task '{task_id}' but cannot finish it: only "
        f"the agents of swarm '{owner_swarm(task_owner)}' that can complete tasks do, so a "
        "contributor's task end must be addressed to the agent that asked"
    )
