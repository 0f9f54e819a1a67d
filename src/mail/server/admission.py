"""Admission: whether a message may start or continue work, and what it holds until it is in.

Every front door that starts work comes through here: ``POST /message`` (plain, streamed,
background: `messaging`), A2A (`mail.a2a.service`), what an MCP agent sends
(`mail.mcp_face.quotas`) and ``/interswarm/message`` and ``/forward`` (`interswarm`).

`admit` (a message) and `admit_incoming` (one that enters the caller's instance another
way: a task id and its size) read the caller's books, then run `CHECKS` in order with no
suspension in between (of two concurrent requests for one task exactly one wins). Each check
passes, refuses with its documented status (an HTTPException), or reserves something in the
`Admission`: the task id claimed (counted by the paused-task bound until the message is in
the runtime), upload bytes in the caller's books, a place behind a running task, the
caller's stream slot. `Admission.release` gives all of it back, in one place; a refusal
gives back the request's Idempotency-Key too.

The bounds that are no caller's stored books (`storage_quota` keeps those) live here: the
event streams one caller may hold open (`StreamSlots`, taken by every SSE response), the
tasks one caller may hold paused or running, and the task store's backlog (503).
"""

from __future__ import annotations

import difflib
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException

from mail.core.message import new_task_id
from mail.core.runtime_resume import TaskSubmitError, message_too_large
from mail.core.stored_bytes import text_bytes
from mail.server.auth import Caller
from mail.server.bodies import MessageRequest
from mail.server.errors import BadRequest
from mail.server.idempotency import Ticket
from mail.server.instances import Instance
from mail.server.team import parse_attachments, store_uploads
from mail.utils.echo import echo

logger = logging.getLogger("mail.server")

RETRY_AFTER_SECONDS = 5  # what a caller at a per-caller bound is told to wait
# What a refused new task is told to wait (seconds): the writer retries every 5 s at most.
STORE_BACKED_UP_RETRY_AFTER = 5
# Refusals for a backed-up store are logged at most this often (one line per episode).
_REFUSAL_LOG_INTERVAL = 30.0
_last_refusal_log = [float("-inf")]
# A claim only has to cover the moment between a request's checks and its submission into
# the runtime (after that the task's own state answers); a claim whose request vanished
# without releasing it (a stream that never started) stops counting after this long.
CLAIM_SECONDS = 30.0


class Admission:
    """One message on its way in: what the checks found and what they reserved."""

    def __init__(
        self, state: Any, req: MessageRequest | None, ticket: Ticket | None = None
    ) -> None:
        self.state, self.req, self.ticket = state, req, ticket
        self.inst: Instance = None  # type: ignore[assignment]  # (set before the checks)
        self.task_id: str | None = req.task_id if req is not None else None
        self.task: Any = None  # the task the message names, when the instance holds it
        self.fresh = False  # the task id was just made up: no task has it
        self.incoming = 0  # bytes the message adds to the caller's books
        self.uploaded = 0  # of which its uploads (new bytes only)
        self.strategy = "reject"
        self.uploads: Any = []
        # What is held, given back by `release`:
        self.slot: StreamSlot | None = None
        self.claimed = False
        self.reserved = 0
        self.place = False

    @property
    def paused(self) -> bool:
        task = self.task
        return (
            task is not None
            and not task.is_running
            and bool(
                task.pending_reviews or self.inst.swarm.runtime.pending_breakpoints(self.task_id)
            )
        )

    @property
    def taken_over(self) -> bool:
        return self.strategy != "reject" and self.task is not None and self.task.is_running

    def release(self) -> None:
        """Give back what is held (idempotent): the message is in the runtime, or refused."""
        if self.claimed:
            self.claimed = False
            self.inst.claimed_tasks.pop(self.task_id, None)  # type: ignore[arg-type]
        if self.reserved:
            self.state.quota.unreserve(self.inst.key, self.reserved)
            self.reserved = 0
        if self.place:
            self.place = False
            self.inst.swarm.runtime.multitask.give_back(self.task_id)
        if self.slot is not None:
            self.slot.release()
            self.slot = None

    async def refuse(self) -> None:
        """A check refused: everything is given back, and so is the key (nothing ran)."""
        self.release()
        if self.ticket is not None:
            await self.ticket.release()


# ------------------------------------------------------------------------------- the checks


def check_subject(subject: str | None, limit: int) -> None:
    """413 for a subject over ``[server.settings] max_subject_chars`` (0 = no limit).

    The one check of every front door that turns a caller's text into a message (POST
    /message, /interswarm/message, A2A): without it the subject was the way around
    ``max_message_body``.
    """
    if limit and subject is not None and len(subject) > limit:
        raise HTTPException(
            413,
            f"parameter 'subject' is {len(subject)} characters; the limit is {limit} "
            "([server.settings] max_subject_chars)",
        )


def _stored_quota(a: Admission) -> None:
    """429 past [server.store] max_stored_tasks_per_caller / max_stored_bytes_per_caller."""
    if a.state.finished is not None:
        a.state.quota.check(
            a.inst.key,
            new_task=a.task is None,
            incoming=a.incoming,
            open_ids=a.inst.swarm.runtime.open_tasks.ids,
        )


def _entrypoint(a: Admission) -> None:
    """400 for an entrypoint the swarm does not have, naming the closest."""
    wanted, state = a.req.entrypoint, a.state  # type: ignore[union-attr]
    names = state.entrypoint_names() if wanted is not None else None
    if not names or wanted in names:
        return
    close = difflib.get_close_matches(wanted, names, n=1, cutoff=0.6)
    hint = f" Did you mean '{close[0]}'?" if close else f" Entrypoints: {', '.join(names)}."
    raise BadRequest(
        f"parameter 'entrypoint': '{echo(wanted)}' is not an entrypoint agent of swarm "
        f"'{state.swarm_name}'.{hint}"
    )


def _subject_and_body(a: Admission) -> None:
    """413 past max_subject_chars or the runtime's max_message_body."""
    req = a.req
    assert req is not None
    check_subject(req.subject, a.state.config.settings.max_subject_chars)
    a.strategy = req.multitask_strategy or a.state.config.settings.multitask_strategy
    if a.strategy != "reject":  # (the runtime's own default): what it does to a running task
        req.kwargs["multitask_strategy"] = a.strategy
    limit = a.inst.swarm.runtime.max_message_body
    if limit and len(req.body) > limit:
        raise HTTPException(413, f"parameter 'body': {message_too_large(len(req.body), limit)}")


def _resume_needs_task(a: Admission) -> None:
    if a.fresh and a.req.resume_from is not None:  # type: ignore[union-attr]
        raise BadRequest("parameter 'task_id' is required when resume_from is set")


def _store_room(a: Admission) -> None:
    """503 with Retry-After while the task store holds `[server.store] max_pending_writes`
    unwritten writes (an outage, a full disk): a new task would only wait in memory, and
    could not be stored before its caller hears about it. New work only: a message to a
    running or paused task goes on (its agents' turns wait for the database instead)."""
    if a.task is not None and (a.task.is_running or a.paused):
        return
    store: Any = getattr(a.state, "store", None)
    backed_up = getattr(store, "writes_backed_up", None)
    if backed_up is None or not backed_up():
        return
    limit = getattr(store, "max_pending_writes", None)
    now = time.monotonic()
    if now - _last_refusal_log[0] >= _REFUSAL_LOG_INTERVAL:
        _last_refusal_log[0] = now
        logger.warning(
            "refusing new tasks (503): the task store holds %s unwritten writes "
            "([server.store] max_pending_writes); last error: %s",
            limit,
            store.last_error,
        )
    raise HTTPException(
        503,
        f"the task store holds {limit} writes the database has not taken yet (the most it "
        f"holds: [server.store] max_pending_writes; last error: {store.last_error}); new "
        "tasks are refused until they are written, try again later",
        headers={"Retry-After": str(STORE_BACKED_UP_RETRY_AFTER)},
    )


def paused_tasks(inst: Instance) -> int:
    """Tasks of the instance waiting on a breakpoint resume or a review decision."""
    runtime = inst.swarm.runtime
    return sum(
        1
        for task_id, task in inst.swarm.get_all_tasks().items()
        if task_id != "*"
        and not task.is_running
        and (task.pending_reviews or runtime.pending_breakpoints(task_id))
    )


def _paused_bound(a: Admission) -> None:
    """429 when the caller already holds `max_paused_tasks_per_caller` tasks that are paused
    or may still pause (running, or claimed by a request under way): each paused task keeps
    its histories and held calls in memory until it is resumed. Counting running ones too
    keeps concurrent new tasks from all pausing past the limit. A message to a paused task
    closes that pause: never refused."""
    limit = a.state.config.settings.max_paused_tasks_per_caller
    resume = a.req.resume_from if a.req is not None else None
    if resume is not None and not (resume == "user_response" and a.task is not None):
        return  # a resume adds no task
    if not limit or a.paused:
        return
    now = time.monotonic()
    held = a.inst.swarm.runtime.open_tasks.ids()  # not a scan of every task the caller ran
    held.update(t for t, at in a.inst.claimed_tasks.items() if now - at < CLAIM_SECONDS)
    held.discard(a.task_id)
    if len(held) >= limit:
        raise HTTPException(
            429,
            f"you have {len(held)} tasks running or paused ({paused_tasks(a.inst)} paused, "
            "waiting for a breakpoint resume or a review), the most one caller may hold "
            f"([server.settings] max_paused_tasks_per_caller = {limit}); wait for one to "
            "finish, or resume or answer a paused one, before starting another",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )


def _not_archived(a: Admission) -> None:
    """409 for a task of an instance reclaimed without a store: a record is never replaced."""
    inst = a.inst
    if a.task is None and not a.fresh:
        if a.task_id in a.state.instances.archived_tasks(inst.kind, inst.id):
            raise HTTPException(
                409,
                f"task '{a.task_id}' belongs to an instance that was reclaimed while idle "
                "and cannot be continued or resumed without persistence (the server keeps no "
                'store: [server.store] kind = "memory")',
            )


def _enqueue_room(a: Admission) -> None:
    """429 when `max_enqueued_messages_per_task` messages already wait behind the task (or
    were let through to wait: requests checked and not submitted yet)."""
    limit = a.state.config.settings.max_enqueued_messages_per_task
    if a.strategy == "enqueue" and limit and a.taken_over:
        if a.inst.swarm.runtime.multitask.places_taken(a.task_id) >= limit:
            raise HTTPException(
                429,
                f"{limit} messages already wait for task '{a.task_id}' to finish its current "
                "work ([server.settings] max_enqueued_messages_per_task); send this one later",
                headers={"Retry-After": "5"},
            )


def _one_request_per_task(a: Admission) -> None:
    """409 while another request works on the task (unless this one takes it over)."""
    claimed = a.inst.claimed_tasks.get(a.task_id) if not a.fresh else None  # type: ignore[arg-type]
    if claimed is not None and time.monotonic() - claimed < CLAIM_SECONDS and not a.taken_over:
        hint = (
            ", or send the message with a multitask_strategy (enqueue, interrupt, rollback)"
            if a.task is not None and a.task.is_running
            else ""
        )
        raise HTTPException(
            409,
            f"task '{a.task_id}' is still running (another request is working on it); wait "
            f"for its answer{hint}",
        )


def _submission(a: Admission) -> None:
    """The runtime's own checks: 409 while calls wait for review, 400 for bad decisions or
    budgets (a new task's too: not a 200 whose answer is the error), 404 for a resume of an
    unknown task."""
    req = a.req
    assert req is not None and a.task_id is not None
    try:
        a.inst.swarm.runtime.check_submission(a.task_id, req.resume_from, req.kwargs)
    except TaskSubmitError as exc:
        raise HTTPException(exc.status, str(exc)) from None


def _claim(a: Admission) -> None:
    """Reserves the task id (counted by the paused-task bound) and, for a message that waits
    behind a running task, its place there; uploads go into the caller's books at once, so
    concurrent requests see each other's (settled by `_store_uploads`)."""
    a.inst.claimed_tasks[a.task_id] = time.monotonic()  # type: ignore[index]
    a.claimed = True
    req = a.req
    if req is None:
        return
    if a.taken_over and a.strategy == "enqueue":
        a.inst.swarm.runtime.multitask.reserve(a.task_id)
        a.place = True
    finished = a.state.finished
    if a.uploaded and finished is not None and finished.team_store is not None:
        a.state.quota.reserve(a.inst.key, a.uploaded)
        a.reserved = a.uploaded


# In order, each with whether it reads the message itself (skipped for `admit_incoming`).
CHECKS: tuple[tuple[Callable[[Admission], None], bool], ...] = (
    (_stored_quota, False),
    (_entrypoint, True),
    (_subject_and_body, True),
    (_resume_needs_task, True),
    (_store_room, False),
    (_paused_bound, False),
    (_not_archived, True),
    (_enqueue_room, True),
    (_one_request_per_task, True),
    (_submission, True),
    (_claim, False),
)


def _run_checks(a: Admission) -> None:
    message = a.req is not None
    for check, reads_message in CHECKS:
        if message or not reads_message:
            check(a)


# ---------------------------------------------------------------------------- the admissions


async def admit(
    state: Any, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> Admission:
    """A message's admission, in order: the caller's stream slot (a stream), its uploads
    (400/413), its instance, its Idempotency-Key taken with the task it names
    (`Ticket.take_message`: a repeat is answered from the key, not by the checks), the
    caller's books, `CHECKS`, its own webhook and its uploads stored. Refused: everything
    given back, then raised. Admitted: the caller calls `release` once the message is in the
    runtime (its first event) or will never be."""
    a = Admission(state, req, ticket)
    try:
        if req.stream:  # 429 at the limit, before any task starts
            a.slot = state.stream_slots.acquire(caller.role, caller.id)
        if req.attachments is not None:
            cfg = state.config.team_tools
            a.uploads = parse_attachments(
                req.attachments,
                cfg.max_attachment_bytes,
                max_filename_chars=cfg.max_filename_chars,
                max_description_chars=cfg.max_description_chars,
            )
        inst = a.inst = await state.instances.get(caller.role, caller.id, caller.api_key)
        if ticket is not None:
            brought_back, a.fresh = await ticket.take_message(state, inst, req)
        elif req.task_id is None:
            req.task_id, brought_back, a.fresh = new_task_id(), True, True
        else:
            brought_back = False
        a.task_id, a.fresh = req.task_id, a.fresh or req.task_id is None
        finished = state.finished
        if finished is not None:
            if not brought_back:
                await finished.bring_back(inst, a.task_id)
            await finished.books(inst.kind, inst.id)
            # A resume of a paused task too: the results it brings (`kwargs`) are kept
            # twice, in the agent's history and in the event that shows them.
            resumed = 2 * text_bytes(req.kwargs) if req.kwargs else 0
            if req.attachments:  # (new bytes only)
                a.uploaded = max(0, req.upload_bytes() - req.replaced_bytes)
            a.incoming = len(req.body) + a.uploaded + resumed
        a.task = None if a.fresh else inst.swarm.get_task_by_id(a.task_id)
        _run_checks(a)
        if req.webhook is not None:  # stored before the task runs
            from mail.server.webhooks import request_webhook

            hook_id = ticket.context.get("webhook") if ticket is not None and ticket.taken else None
            assert a.task_id is not None
            req.webhook = await request_webhook(state, caller, a.task_id, req.webhook, hook_id)
        if a.uploads:
            await _store_uploads(a, caller)
        a.place = False  # (the runtime takes it when the message is enqueued)
    except BaseException:
        await a.refuse()
        raise
    return a


async def _store_uploads(a: Admission, caller: Caller) -> None:
    req, ticket, state = a.req, a.ticket, a.state
    assert req is not None and a.task_id is not None
    ids = ticket.context.get("uploads") if ticket is not None and ticket.taken else None
    replacing = bool(ticket is not None and ticket.takeover)
    stored = await store_uploads(a.inst.swarm, caller, a.task_id, a.uploads, ids, replacing)
    req.kwargs["attachments"] = stored
    if a.reserved:  # the reservation becomes the caller's team bytes
        state.quota.unreserve(a.inst.key, a.reserved)
        a.reserved = 0
    if state.finished is not None and state.finished.team_store is not None:
        added = sum(len(data) for _, _, data in a.uploads) - req.replaced_bytes
        state.quota.add_team(a.inst.key, max(0, added))


async def admit_incoming(
    state: Any, inst: Instance, task_id: str, incoming: int, ticket: Ticket | None = None
) -> Admission:
    """`admit` for a message that enters the caller's instance another way (a user's ``POST
    /interswarm/message``, a peer's ``/interswarm/forward``, an MCP agent's send; a peer's
    tasks are its caller's, as a local caller's are): a finished task it names is put back
    first; a message to a running or paused task is never refused (its work goes on);
    otherwise the `CHECKS` that do not read a message. Refused: the key taken (`ticket`) is
    given back. Admitted: release it once the message is in the instance."""
    a = Admission(state, None, ticket)
    a.inst, a.task_id, a.incoming = inst, task_id, incoming
    try:
        finished = state.finished
        if finished is not None:
            await finished.bring_back(inst, task_id)
            await finished.books(inst.kind, inst.id)
        a.task = inst.swarm.get_task_by_id(task_id)
        if a.task is None or not (a.task.is_running or a.paused):
            _run_checks(a)
    except BaseException:
        await a.refuse()
        raise
    return a


# ------------------------------------------------------------------------------ stream slots


class StreamSlot:
    """One caller's hold on one event stream; `release` is idempotent."""

    def __init__(self, slots: StreamSlots, owner: tuple[str, str]) -> None:
        self._slots = slots
        self._owner = owner
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._slots._release(self._owner)


class StreamSlots:
    """How many event streams one caller may hold open at once. Every SSE response (``POST
    /message`` with ``stream: true``, ``GET /task/events``, A2A's) takes a slot of its caller
    before anything starts and gives it back when the response ends, however it ends; at
    ``[server.settings] max_event_streams_per_caller`` it is 429 with Retry-After and no
    task starts (each open stream holds a connection, a descriptor and a buffer)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0 = no bound
        self._open: dict[tuple[str, str], int] = {}

    def open_for(self, role: str, caller_id: str) -> int:
        return self._open.get((role, caller_id), 0)

    def acquire(self, role: str, caller_id: str) -> StreamSlot:
        owner = (role, caller_id)
        held = self._open.get(owner, 0)
        if self.limit and held >= self.limit:
            raise HTTPException(
                429,
                f"you already have {held} event streams open, the most one caller may hold "
                f"([server.settings] max_event_streams_per_caller = {self.limit}); close one "
                "or retry later",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        self._open[owner] = held + 1
        return StreamSlot(self, owner)

    def _release(self, owner: tuple[str, str]) -> None:
        left = self._open.get(owner, 0) - 1
        if left > 0:
            self._open[owner] = left
        else:
            self._open.pop(owner, None)
