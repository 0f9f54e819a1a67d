"""``POST /message`` from the request to its answer, in one direction."""

from __future__ import annotations

import asyncio
import difflib
import logging
import time
from collections.abc import AsyncIterator, Callable
from types import MappingProxyType
from typing import Any

from fastapi import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from mail.core.message import new_task_id
from mail.core.runtime_resume import TaskSubmitError, message_too_large
from mail.core.stored_bytes import text_bytes
from mail.core.tasks import state_for_answer
from mail.server.auth import Caller, caller_admin_or_user
from mail.server.bodies import MessageRequest, parse_message
from mail.server.errors import BadRequest
from mail.server.finished_tasks import FREED_BY, CallerBooks, human_bytes
from mail.server.idempotency import Ticket, current_ticket
from mail.server.instances import Instance
from mail.server.jsonio import JSONBody
from mail.server.sse import EventStreamResponse, event_stream_response
from mail.server.state import ServerState
from mail.server.stream_shutdown import StreamSlot
from mail.server.team import parse_attachments, store_uploads
from mail.utils.background import hold
from mail.utils.echo import echo

logger = logging.getLogger("mail.server")


async def handle(request: Request) -> Response:
    """``POST /message`` (routed under the Idempotency-Key guard, `routes_user`, which has
    resolved and role-checked a keyed request's caller already)."""
    ticket = current_ticket(request)
    keyed = None if ticket is None else ticket.caller
    caller = keyed if keyed is not None else await caller_admin_or_user(request)
    req = await parse_message(request)
    state: ServerState = request.app.state.mail
    if req.stream:
        return await stream_message(state, caller, req, ticket)
    if req.background or req.preferred:
        body = await background_message(state, caller, req, ticket)
        headers = {"Location": body["status_url"]}
        if req.preferred:
            headers["Preference-Applied"] = "respond-async"
        return JSONBody(body, status_code=202, headers=headers)
    return JSONBody(await post_message(state, caller, req, ticket))


def submit_kwargs(req: MessageRequest) -> dict[str, Any]:
    """What the swarm's submission takes besides the body."""
    return dict(
        subject=req.subject,
        msg_type=req.msg_type,
        entrypoint=req.entrypoint,
        task_id=req.task_id,
        resume_from=req.resume_from,
        **req.kwargs,
    )


def _timeout(state: ServerState, req: MessageRequest) -> float:
    return req.timeout if req.timeout is not None else state.config.settings.message_timeout


async def _leased_events(
    state: ServerState, admitted: Admission, stored: asyncio.Event, *, detached: bool = False
) -> AsyncIterator[Any]:
    """The task's events, `stored` set once the submission is committed. The caller's
    instance is leased (never reclaimed) meanwhile; the admission is released once the
    message is in the runtime (its first event: the task's state answers from there)."""
    req, inst, ticket = admitted.req, admitted.inst, admitted.ticket
    assert req is not None
    events = inst.swarm.stream_events(
        req.body,
        timeout=_timeout(state, req),
        ping_interval=state.config.settings.sse_ping_interval,
        on_stored=stored.set,
        detached=detached,
        **submit_kwargs(req),
    )
    try:
        async with state.instances.lease(inst):
            async for event in events:
                admitted.release()
                yield event
    finally:
        admitted.release()
    state.finished.answered(inst, req.task_id)  # the whole answer went out: it may leave memory
    if ticket is not None and not detached:
        # A repeat of a stream attaches to the task's events, which hold all of it: no
        # outcome row (`STREAMED_OUTCOME`) once the task ended.
        ticket.task_ended(inst, req)


async def run_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> tuple[dict[str, Any], list[Any]]:
    """Submit and wait for the task's final MAILMessage; returns ``(message, events)``."""
    admitted = await admit(state, caller, req, ticket)
    inst = admitted.inst
    try:
        async with state.instances.lease(inst):
            response, events = await inst.swarm.post_message_task_events(
                req.body,
                show_events=req.show_events,
                timeout=_timeout(state, req),
                **submit_kwargs(req),
            )
        if ticket is not None:
            ticket.task_answered(inst, req, response)
    finally:
        admitted.release()
    _log_outcome(inst, req.task_id, response)
    state.finished.answered(inst, req.task_id)
    return response, events


_NORMAL_ENDINGS = frozenset({"::task_complete::", "::breakpoint_tool_call::", "::action_review::"})


def _log_outcome(inst: Instance, task_id: str | None, response: Any) -> None:
    # Only unusual endings are logged at INFO; a normal completion costs a level check.
    message = response.get("message", {}) if isinstance(response, dict) else {}
    subject = message.get("subject", "")
    if subject in _NORMAL_ENDINGS:
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("task %s of %s ended with %s", task_id, inst.owner, subject)
    else:
        logger.info("task %s of %s ended with %s", task_id, inst.owner, subject or "no subject")


async def post_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> dict[str, Any]:
    """``POST /message`` without streaming: ``{"response", "events", "task_id", "state"}``."""
    response, events = await run_message(state, caller, req, ticket)
    message = response.get("message", {}) if isinstance(response, dict) else {}
    answer = {
        "response": message.get("body", ""),
        "events": [e.to_record(parsed=True) for e in events] if req.show_events else None,
        "task_id": message.get("task_id") or req.task_id,
        # How the task ended (or why it paused), as GET /task says: "failed" on an error.
        "state": state_for_answer(message.get("subject")).value,
    }
    if req.webhook is not None:
        answer["webhook"] = req.webhook  # {"id", "secret"} of the message's own webhook
    return answer


async def start_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> asyncio.Task[None]:
    """``POST /message``'s work for a caller that does not wait for the answer (a background
    message; the MCP ``post_message(wait=false)``): what refuses the message (a quota, an
    unknown or running task, a bad entrypoint) raises here, and the submission (and the
    request's Idempotency-Key) is committed before this returns (acknowledged means stored: a
    task said to have started exists after a kill -9). The task runs on in the returned
    asyncio task, which the caller must hold."""
    admitted = await admit(state, caller, req, ticket)
    stored = asyncio.Event()
    # An enqueued message waits for its turn, whatever its timeout (`detached`).
    events = _leased_events(state, admitted, stored, detached=True)

    async def run() -> None:
        async for _event in events:
            pass

    runner = asyncio.create_task(run(), name=f"mail-message-{req.task_id}")
    committed = asyncio.create_task(stored.wait())
    try:
        await asyncio.wait({runner, committed}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        committed.cancel()
    if not stored.is_set():
        runner.result()  # what refused the submission (it ended before the commit)
    return runner


async def background_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> dict[str, Any]:
    """``POST /message`` in the background (``"background": true`` or ``Prefer:
    respond-async``): every check of a plain message, then the answer as soon as the task
    and the message are stored, while the task runs on (held by the server until it ends).
    The caller follows it with ``GET /task``, ``GET /task/events`` or a webhook."""
    runner = await start_message(state, caller, req, ticket)
    runner.add_done_callback(_background_ended)
    hold(state.background, runner)
    assert req.task_id is not None
    inst = state.instances.peek(caller.role, caller.id)
    task = inst.swarm.get_task_by_id(req.task_id) if inst is not None else None
    return accepted_body(
        req.task_id, task.state.value if task is not None else "running", req.webhook
    )


def _background_ended(runner: asyncio.Task[None]) -> None:
    if not runner.cancelled() and runner.exception() is not None:
        logger.error("background message failed: %s", runner.exception())


def accepted_body(task_id: str, state: str, hook: dict[str, Any] | None) -> dict[str, Any]:
    """The answer to a background message (and to a repeat of it by its Idempotency-Key)."""
    body: dict[str, Any] = {
        "task_id": task_id,
        "state": state,
        "status_url": f"/task/{task_id}",
        "events_url": f"/task/events?task_id={task_id}",
    }
    if hook is not None:
        body["webhook"] = hook  # {"id", "secret"} of the message's own webhook
    return body


async def stream_message(
    state: ServerState, caller: Caller, req: MessageRequest, ticket: Ticket | None = None
) -> EventStreamResponse:
    """Submit and stream the task's events as SSE, ending with ``task_complete``.

    The caller's stream slot is taken first (`admit`): at the limit the answer is 429 and
    no task starts. The response holds the slot until it ends.
    """
    admitted = await admit(state, caller, req, ticket)
    slot, admitted.slot = admitted.slot, None  # the response's from here
    try:
        # Set once the store committed the submission (Swarm.submit_events): the response's
        # headers wait for it, as a plain answer waits for its commit.
        stored = asyncio.Event()
        response = event_stream_response(
            _leased_events(state, admitted, stored),
            max_buffer_bytes=state.config.settings.sse_max_buffer_bytes,
            stall_timeout=state.config.settings.sse_slow_reader_timeout,
            task_id=req.task_id,
            streams=state.open_streams,
            slot=slot,
            # Nothing, headers included, leaves before the submission is committed.
            opened=stored,
            committed=admitted.inst.committed,
        )
        name_webhook(response, req.webhook)
        return response
    except BaseException:
        if slot is not None:
            slot.release()
        raise


def name_webhook(response: Any, hook: dict[str, Any] | None) -> None:
    """A stream names the message's own webhook (``{"id", "secret"}``) in its headers: the
    first answer and every replay of it by its Idempotency-Key alike."""
    if hook is not None:
        response.headers["MAIL-Webhook-Id"] = hook["id"]
        if hook["secret"]:
            response.headers["MAIL-Webhook-Secret"] = hook["secret"]


# ------------------------------------------------------------------------------ admission
# Whether a message may start or continue work, and what it holds until it is in.

# A caller at a bound, or the store backed up, waits (read-only: every refusal shares it).
RETRY_AFTER = MappingProxyType({"Retry-After": "5"})
_REFUSAL_LOG_INTERVAL = 30.0  # a backed-up store's refusals are logged at most this often
_last_refusal_log = [float("-inf")]
# A claim covers a request's checks up to its submission; one whose request vanished without
# releasing it (a stream that never started) stops counting after this long.
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
        self.books: CallerBooks | None = None  # the caller's (None: no bounds kept)
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
        if self.reserved and self.books is not None:
            self.books.reserved = max(0, self.books.reserved - self.reserved)
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
    """413 for a subject over ``[server.settings] max_subject_chars`` (0 = no limit)."""
    if limit and subject is not None and len(subject) > limit:
        raise HTTPException(
            413,
            f"parameter 'subject' is {len(subject)} characters; the limit is {limit} "
            "([server.settings] max_subject_chars)",
        )


def check_stored(
    quota: Any, books: CallerBooks, new_task: bool, incoming: int, open_ids: Any = tuple
) -> None:
    """429 when a message of `incoming` bytes passes the caller's stored-task bound (a new
    task; `open_ids`: its running and paused tasks, not in the books yet) or byte bound."""
    if new_task and quota.max_tasks:
        count = len(books.tasks) + sum(1 for t in open_ids() if t not in books.tasks)
        if count >= quota.max_tasks:
            raise HTTPException(
                429,
                f"you keep {count} stored tasks, the most one caller may keep ([server.store] "
                f"max_stored_tasks_per_caller = {quota.max_tasks}); {FREED_BY}",
            )
    if quota.max_bytes and books.total + incoming > quota.max_bytes:
        raise HTTPException(
            429,
            f"you store {human_bytes(books.total)} in {len(books.tasks)} tasks, and this "
            f"message ({human_bytes(incoming)}) would pass the most one caller may store "
            f"([server.store] max_stored_bytes_per_caller = {quota.max_bytes}); {FREED_BY}",
        )


def _stored_quota(a: Admission) -> None:
    if a.books is not None:
        runtime = a.inst.swarm.runtime
        check_stored(a.state.quota, a.books, a.task is None, a.incoming, runtime.open_tasks.ids)


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
    """503 for new work while the task store holds `max_pending_writes` unwritten writes."""
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
        headers=RETRY_AFTER,
    )


def paused_tasks(inst: Instance) -> int:
    runtime = inst.swarm.runtime
    return sum(
        1
        for task_id, task in inst.swarm.get_all_tasks().items()
        if task_id != "*"
        and not task.is_running
        and (task.pending_reviews or runtime.pending_breakpoints(task_id))
    )


def _paused_bound(a: Admission) -> None:
    """429 at `max_paused_tasks_per_caller` tasks paused or that may pause (running, claimed);
    a message to a paused task closes that pause: never refused."""
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
            headers=RETRY_AFTER,
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
    """429 when `max_enqueued_messages_per_task` messages wait (or were let through to wait)."""
    limit = a.state.config.settings.max_enqueued_messages_per_task
    if a.strategy == "enqueue" and limit and a.taken_over:
        if a.inst.swarm.runtime.multitask.places_taken(a.task_id) >= limit:
            raise HTTPException(
                429,
                f"{limit} messages already wait for task '{a.task_id}' to finish its current "
                "work ([server.settings] max_enqueued_messages_per_task); send this one later",
                headers=RETRY_AFTER,
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
    """The runtime's own: 409 calls wait for review, 400 bad decisions/budgets, 404 resume."""
    req = a.req
    assert req is not None and a.task_id is not None
    try:
        a.inst.swarm.runtime.check_submission(a.task_id, req.resume_from, req.kwargs)
    except TaskSubmitError as exc:
        raise HTTPException(exc.status, str(exc)) from None


def _claim(a: Admission) -> None:
    """Reserves the task id, a place behind a running task, and uploads in the caller's books
    (so concurrent requests see each other's; settled by `_store_uploads`)."""
    a.inst.claimed_tasks[a.task_id] = time.monotonic()  # type: ignore[index]
    a.claimed = True
    req = a.req
    if req is None:
        return
    if a.taken_over and a.strategy == "enqueue":
        a.inst.swarm.runtime.multitask.reserve(a.task_id)
        a.place = True
    if a.uploaded and a.books is not None and a.state.finished.team_store is not None:
        a.books.reserved += a.uploaded
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
    """In order: stream slot, uploads (400/413), instance, Idempotency-Key with the task it
    names, the caller's books, `CHECKS`, webhook, uploads stored. Refused: all given back,
    then raised. Admitted: `release` once the message is in the runtime (or never will be)."""
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
        put_back = None if brought_back else a.task_id
        a.books = await state.finished.books(inst.kind, inst.id, inst, put_back)
        # A resume's results (`kwargs`) are kept twice: in a history and in an event.
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
    books = a.books
    if books is not None and state.finished.team_store is not None:  # reserved -> team bytes
        books.reserved = max(0, books.reserved - a.reserved)
        books.team_bytes += max(0, sum(len(data) for _, _, data in a.uploads) - req.replaced_bytes)
        a.reserved = 0


async def admit_incoming(
    state: Any, inst: Instance, task_id: str, incoming: int, ticket: Ticket | None = None
) -> Admission:
    """`admit` for a message that enters the instance another way (interswarm, MCP): the
    `CHECKS` that read no message, unless its task is running or paused (never refused)."""
    a = Admission(state, None, ticket)
    a.inst, a.task_id, a.incoming = inst, task_id, incoming
    try:
        a.books = await state.finished.books(inst.kind, inst.id, inst, task_id)
        a.task = inst.swarm.get_task_by_id(task_id)
        if a.task is None or not (a.task.is_running or a.paused):
            _run_checks(a)
    except BaseException:
        await a.refuse()
        raise
    return a
