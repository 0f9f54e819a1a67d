"""What a keyed request that runs a task keeps with its ``Idempotency-Key``, beside
``mail.server.messaging``: the task it starts (``POST /interswarm/message``), the ids of its
uploads, whether its key is committed before the answer names the task, and whether the
task's own answer is the key's outcome (no outcome row)."""

from __future__ import annotations

from typing import Any

from mail.server.bodies import MessageRequest
from mail.server.idempotency_guard import Ticket
from mail.server.instances import Instance
from mail.server.state import ServerState


async def take_task_key(
    state: ServerState, inst: Instance, ticket: Ticket, task_id: str, message: Any, *, new: bool
) -> None:
    """The key of a request that runs one task outside ``POST /message`` (``POST
    /interswarm/message``) committed with that task, and where its events and answer stand,
    before the task gets the message: what `mail.server.messaging` records for ``POST
    /message``, for the same resolver (`mail.server.message_replay.task_resolver`). `new`: an
    id just made up (no task has it).

    The `message` (a MAIL message about to leave for a peer) keeps the id recorded with the
    key: a retry that takes over from a first attempt that died before its task was stored
    sends it again under the same id, which the peer drops as a re-delivery (its agents do
    not answer it twice)."""
    if not new and state.finished is not None:
        await state.finished.bring_back(inst, task_id)
    earlier = ticket.context.get("message") if ticket.takeover else None
    if isinstance(earlier, str) and earlier:
        message["id"] = earlier
    task = None if new else inst.swarm.get_task_by_id(task_id)
    last = getattr(task, "response", None)
    after = 0 if task is None else len(task.events)
    context = {"after": after, "answer": (last or {}).get("id"), "message": message["id"]}
    await ticket.take(task_id, context)


def upload_ids(ticket: Ticket, count: int) -> list[str]:
    """The attachment ids a keyed request's uploads are stored under, kept with its key: a
    retry that takes over from a first attempt that died after storing them (before its
    task started) stores them under the same ids, replacing them, not a second time."""
    from mail.core.team.service import new_id  # (lazily, as `store_uploads` does)

    earlier = ticket.context.get("uploads") if ticket.takeover else None
    if (
        isinstance(earlier, list)
        and len(earlier) == count
        and all(isinstance(i, str) and i.startswith("att_") for i in earlier)
    ):
        return earlier
    return [new_id("att") for _ in range(count)]


async def stored_upload_bytes(inst: Instance, ids: list[str]) -> int:
    """The bytes stored under `ids` already (a keyed retry's uploads, which replace them)."""
    team = getattr(inst.swarm, "team", None)
    if team is None:
        return 0
    total = 0
    for attachment_id in ids:
        earlier = await team.store.get_attachment(team.key, attachment_id, with_data=False)
        if earlier is not None:
            total += int(earlier[0].get("size") or 0)
    return total


async def key_stored(ticket: Ticket | None) -> None:
    """A key that went with its task's writes (`take_with_work`) is committed before the
    answer (or a stream's first event) names the task: the swarm's own flush before an
    answer is best effort (skipped during an outage, given up after a few seconds), this one
    waits, and refuses the request (StoreUnavailableError: 503) when the key is not stored."""
    if ticket is not None and ticket.taken and ticket.with_work and not key_committed(ticket):
        await ticket.guard.store.settle(ticket.scope, ticket.key)


def key_committed(ticket: Ticket) -> bool:
    """Whether the key of a ticket taken with its work is committed, known with no await
    (the usual case once its task answered)."""
    store = ticket.guard.store
    mark = ticket.mark
    return store.written(mark) if mark else store.settled(ticket.scope, ticket.key)


def task_answered(inst: Instance, req: MessageRequest, response: Any, ticket: Ticket) -> bool:
    """After the task of a keyed plain ``POST /message`` answered (its ticket taken): whether
    its answer is the task's own (`answered_by_task`), and whether its key is committed
    (`key_stored`: False when the caller must `settle` it before the answer leaves)."""
    if not ticket.with_work:
        return True
    if not req.show_events:
        answered_by_task(inst, req, response, ticket)
    mark = ticket.mark  # (`key_committed`, inline: the keyed request's hot path)
    store = ticket.guard.store
    return store.written(mark) if mark else store.settled(ticket.scope, ticket.key)


def answered_by_task(inst: Instance, req: MessageRequest, response: Any, ticket: Ticket) -> None:
    """A plain answer of a task that completed is the task's own (its answer and its
    ``task_complete`` event, committed before it): its key needs no outcome row, a repeat
    rebuilds the same bytes from the task (`mail.server.message_replay`). Any other ending (a
    timeout, a pause, an error) and an answer with the events keep their stored outcome."""
    message = response.get("message") if type(response) is dict else None
    if type(message) is not dict or message.get("subject") != "::task_complete::":
        return
    task_id = req.task_id
    if type(message.get("body", "")) is not str or message.get("task_id") not in (
        None,
        "",
        task_id,
    ):
        return
    if ticket.carried:  # (`task_is_outcome`, inline: the keyed request's hot path)
        task = inst.swarm.runtime.mail_tasks.get(task_id or "")
        ticket.answered_by_task = task is not None and not task.is_running
    else:
        ticket.answered_by_task = task_is_outcome(inst, req, ticket)


def task_is_outcome(inst: Instance, req: MessageRequest, ticket: Ticket) -> bool:
    """Whether the key's row went with its task's writes (`carried`: what the task stores
    later commits after it) and the task is no longer running (the key counts as finished
    at the caller's bound, `evict_finished`)."""
    if not ticket.carried:  # (known to the ticket when `_take_now` took it)
        carried = getattr(ticket.guard.store, "carried", None)
        if not (callable(carried) and carried(ticket.scope, ticket.key)):
            return False
    task = inst.swarm.get_task_by_id(req.task_id or "")
    return task is not None and not task.is_running
