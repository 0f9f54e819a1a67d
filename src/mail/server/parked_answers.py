"""A peer's answer to a task whose owner's instance is not loaded: kept in the store until it is."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from mail.api.stored_tasks import record_is_open, task_from_snapshot
from mail.core.message import parse_task_contributor
from mail.core.runtime_durable import journal_key
from mail.net.bridge import TASK_END_SUBJECTS
from mail.net.bridge_inbound import (
    already_received,
    swarm_target_problem,
    task_end,
    user_target_problem,
)
from mail.net.trust import TrustError, check_existing_task, check_subject, peer_sender
from mail.server.jsonio import dumps
from mail.store.base import InstanceKey, InstanceSnapshot
from mail.store.lifecycle import PARKED_SUFFIX
from mail.utils.echo import echo

logger = logging.getLogger("mail.server")

# Seconds the store may take to commit a kept envelope before the peer is answered 503.
COMMIT_TIMEOUT = 10.0
RETRY_AFTER = 5

# Per (instance, task): its lock and how many hold or wait for it (removed at none).
_locks: dict[tuple[InstanceKey, str], tuple[asyncio.Lock, list[int]]] = {}


@asynccontextmanager
async def _task_lock(key: InstanceKey, task_id: str) -> AsyncIterator[None]:
    """One keeping or handing over of a task's envelopes at a time (in this process)."""
    slot = (key, task_id)
    lock, users = _locks.setdefault(slot, (asyncio.Lock(), [0]))
    users[0] += 1
    try:
        async with lock:
            yield
    finally:
        users[0] -= 1
        if not users[0]:
            del _locks[slot]


@dataclass(frozen=True)
class _SwarmView:
    """What the instance's checks read of it (`mail.net.bridge_inbound.LocalSwarm`), from
    the server's swarm template: the instance is not loaded."""

    swarm_name: str
    entrypoint: str
    user_id: str
    this_owner: str
    agents: Mapping[str, Any]

    def _is_local_swarm(self, swarm: str | None) -> bool:
        return swarm is None or swarm == "" or swarm == self.swarm_name


def _check(state: Any, owner: str, task: Any, envelope: dict[str, Any]) -> None:
    """The instance's own checks of an envelope for an existing task (`InterswarmBridge.
    receive`), as HTTP errors: an envelope it would refuse is not acknowledged as delivered.
    `owner`: the contributor whose instance would take it."""
    source = envelope["source_swarm"]
    payload = envelope["payload"]
    template = state.template
    _, ident, _ = parse_task_contributor(owner)
    view = _SwarmView(
        swarm_name=state.swarm_name,
        entrypoint=str(getattr(template, "entrypoint", "")),
        user_id=ident,
        this_owner=owner,
        agents={agent.name: agent for agent in getattr(template, "agents", [])},
    )
    try:
        for contributor in [envelope["task_owner"], *envelope["task_contributors"]]:
            try:
                parse_task_contributor(contributor)
            except ValueError as exc:
                raise TrustError(str(exc), 400) from exc
        check_existing_task(
            source_swarm=source,
            task_id=task.task_id,
            task_owner=task.task_owner,
            forwarded_to=task.remote_swarms,
        )
        if task.task_owner != envelope["task_owner"]:
            raise TrustError(
                f"task '{task.task_id}' here belongs to someone else: use another task id", 409
            )
        peer_sender(payload.get("sender"), source_swarm=source, task_owner=envelope["task_owner"])
        check_subject(payload.get("subject"), source_swarm=source)
        if payload.get("subject") in TASK_END_SUBJECTS:  # (whom it was sent to is not known)
            task_end(view, payload, source, envelope["task_owner"], direct=False)
        problem = swarm_target_problem(view, payload) or user_target_problem(view, payload)
        if problem is not None:
            raise TrustError(problem, 400)
    except TrustError as exc:
        logger.warning("refused interswarm answer from swarm '%s': %s", source, exc)
        raise HTTPException(exc.status, str(exc)) from exc


def _holds(snapshot: InstanceSnapshot, task: Any, message_id: str) -> bool:
    """Whether the store has this message for the task already: kept here, pending in its
    journal, or handed to an agent (its ``new_message`` event)."""
    for item in snapshot.queues.get(task.task_id + PARKED_SUFFIX, []):
        if item.get("envelope", {}).get("message_id") == message_id:
            return True
    for entry in snapshot.queues.get(journal_key(task.task_id), []):
        message = entry.get("message")
        if isinstance(message, dict) and message.get("id") == message_id:
            return True
    return already_received(None, task, message_id)


def _check_room(
    settings: Any, task_id: str, kept: list[dict[str, Any]], item: dict[str, Any]
) -> None:
    """413 for an answer bigger than a task may keep; 503 + Retry-After when the task keeps
    as many answers, or as many bytes, as it may (``[server.settings]
    max_parked_answers_per_task`` / ``max_parked_bytes_per_task``)."""
    limit = settings.max_parked_bytes_per_task
    size = len(dumps(item))
    if size > limit:
        raise HTTPException(
            413,
            f"the answer is {size} bytes; a task whose owner is away keeps at most {limit} "
            "([server.settings] max_parked_bytes_per_task)",
        )
    held = sum(len(dumps(k)) for k in kept)
    if len(kept) >= settings.max_parked_answers_per_task or held + size > limit:
        raise HTTPException(
            503,
            f"task '{echo(task_id)}' already keeps {len(kept)} answers ({held} bytes) for its "
            "owner, who has not come back since a restart; try again later",
            headers={"Retry-After": str(RETRY_AFTER)},
        )


async def park(
    state: Any, key: InstanceKey, owner: str, envelope: dict[str, Any], direction: str
) -> str:
    """Keep `envelope` for the task of `key`'s instance (not loaded); its task id once it is
    committed. 404 when the store does not have the task running or paused."""
    task_id = envelope["payload"]["task_id"]
    lifecycle = getattr(state.finished, "lifecycle", None)
    if lifecycle is None:  # no store that outlives the instance
        raise HTTPException(404, f"no mail instance found for task with id {echo(task_id)}")
    async with _task_lock(key, task_id):
        snapshot = await lifecycle.load_tasks(key, [task_id])
        record = snapshot.tasks.get(task_id)
        task = task_from_snapshot(snapshot, task_id)
        if record is None or task is None:
            raise HTTPException(404, f"task {echo(task_id)!r} is not known to this swarm")
        _check(state, owner, task, envelope)
        if _holds(snapshot, task, envelope["message_id"]):
            return task_id  # a repeat (a router's retry): kept or delivered already
        if not record_is_open(record):  # an instance loads only running and paused tasks
            raise HTTPException(
                404, f"task {echo(task_id)!r} has ended and its owner's instance is not loaded"
            )
        kept = snapshot.queues.get(task_id + PARKED_SUFFIX, [])
        item = {"envelope": envelope, "direction": direction}
        _check_room(state.config.settings, task_id, kept, item)
        store = lifecycle.store
        await store.save_queue(key, task_id + PARKED_SUFFIX, [*kept, item])
        if not await store.flush(COMMIT_TIMEOUT):
            raise HTTPException(
                503,
                "the store could not keep the answer (see GET /status); send it again",
                headers={"Retry-After": str(RETRY_AFTER)},
            )
    logger.info(
        "kept an answer from swarm '%s' for task %s until its owner's instance is loaded",
        envelope["source_swarm"],
        task_id,
    )
    return task_id


async def deliver(swarm: Any) -> None:
    """Hand the envelopes kept for a freshly loaded instance to it, then forget them."""
    parked: dict[str, list[dict[str, Any]]] = getattr(swarm, "parked_answers", None) or {}
    observer = getattr(swarm, "_store_observer", None)
    if not parked or observer is None:
        return
    if getattr(swarm.runtime, "interswarm", None) is None:  # kept for a later load
        logger.warning("interswarm is not running: %d task(s) keep their answers", len(parked))
        return
    swarm.parked_answers = {}
    for task_id, items in parked.items():
        async with _task_lock(observer.key, task_id):
            for item in items:
                envelope = item.get("envelope")
                if not isinstance(envelope, dict):
                    continue
                try:
                    swarm.accept_interswarm_message(envelope, item.get("direction", "back"))
                except Exception as exc:  # noqa: BLE001 - the owner's request must go on
                    # The peer was told it was delivered; the operator's log says it was not.
                    logger.warning(
                        "an answer kept for task %s from swarm '%s' was refused when its "
                        "owner's instance was loaded: %s",
                        task_id,
                        envelope.get("source_swarm"),
                        exc,
                    )
            # Removed after what handing them over wrote (one write order): a crash before
            # that hands them over again.
            _forget_after_journal(swarm, observer, task_id)
        logger.info("handed %d kept answer(s) to task %s", len(items), task_id)
    try:
        await swarm.flush_before_answer()
    except Exception:  # noqa: BLE001 - written later; the owner's request goes on
        logger.warning("storing the handed-over answers is late", exc_info=True)


def forget(swarm: Any, task_id: str) -> None:
    """The kept copies of a task's answers are not needed: each was handed to the loaded
    instance (removed after what that wrote, in one write order)."""
    observer = getattr(swarm, "_store_observer", None)
    if observer is not None:
        _forget_after_journal(swarm, observer, task_id)


def _forget_after_journal(swarm: Any, observer: Any, task_id: str) -> None:
    """Remove the task's kept row behind the journal entries of what was handed over: the
    journal writes a changed task at the end of the loop's pass (sooner when the store
    reads it at its batch), so it is written now, then the row's removal is queued."""
    journal = getattr(swarm.runtime, "journal", None)
    if journal is not None:
        journal.flush()
    observer.forget_queue(task_id + PARKED_SUFFIX)
