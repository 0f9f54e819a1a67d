"""Finished tasks leave memory; the store answers for them ([server.store], docs/database.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mail.api.stored_tasks import restore_task, task_from_snapshot
from mail.core.agent_histories import AgentHistories
from mail.core.finished_tasks import can_forget, forget_finished, is_finished
from mail.core.tasks import MAILTask, task_files_bytes
from mail.server import task_listing
from mail.server.instances import Instance, InstanceManager, instance_kind
from mail.store import InstanceKey, lifecycle_for
from mail.store.lifecycle import record_is_finished, stored_summary
from mail.telemetry.usage import TaskUsage, task_usage

logger = logging.getLogger("mail.server")

Owner = tuple[str, str]  # (instance kind, caller id)

SWEEP_INTERVAL = 1.0  # seconds between looks for finished tasks nobody was waiting for
SWEEP_GRACE = 2.0  # a finished task nobody waited for stays this long (late readers)
RETRY_INTERVAL = 0.02  # an answered task whose last turn is still winding down: again then
# Sizes and summaries of let-go tasks are written together, at most this often (a busy
# server writes one batch for many tasks, not a transaction per request); while the store
# fails (a full disk, PostgreSQL away) the wait doubles up to SAVE_RETRY_MAX.
SAVE_INTERVAL = 0.25
SAVE_RETRY_MAX = 5.0
# The heap is trimmed (see `give_back_memory`) once messages of TRIM_AFTER_BYTES were let
# go of, or TRIM_IDLE_BYTES when nothing else waits; at most every TRIM_INTERVAL seconds.
TRIM_AFTER_BYTES = 8 * 1024 * 1024
TRIM_IDLE_BYTES = 1024 * 1024
TRIM_INTERVAL = 1.0
# A caller at a bound has its books read again from the store at most this often: tasks
# removed outside this server (`mail db-prune` beside a live PostgreSQL server, another
# front end's retention) leave them, and the caller gets in again.
REREAD_AT_BOUND = 5.0
HEAL_PER_PAGE = 20  # stored tasks without a summary read whole per GET /tasks page
# How long `bring_back` waits for the put-back task's record to be committed.
BRING_BACK_FLUSH_SECONDS = 5.0
_EMPTY_USAGE = TaskUsage().total.as_dict()


# How often a caller's team data is measured again (its threads grow while its tasks run).
TEAM_MEASURE_INTERVAL = 10.0
FREED_BY = (
    "finished tasks are removed after [server.store] finished_task_ttl, or an operator can "
    "remove them with `mail db-prune`"
)


def human_bytes(size: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover - the loop returns


class TaskSizes(dict[str, int]):
    """task_id -> stored bytes, with their sum kept as entries change (`bytes`): the quota
    check runs on every message, and summing a caller's 10,000 tasks each time cost more
    than the rest of a request's work."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __setitem__(self, task_id: str, size: int) -> None:
        self.bytes += size - self.get(task_id, 0)
        super().__setitem__(task_id, size)

    def __delitem__(self, task_id: str) -> None:
        self.bytes -= self[task_id]
        super().__delitem__(task_id)

    def pop(self, task_id: str, default: Any = None) -> Any:  # type: ignore[override]
        if task_id in self:
            self.bytes -= self[task_id]
            return super().pop(task_id)
        return default

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for task_id, size in dict(*args, **kwargs).items():
            self[task_id] = size

    def setdefault(self, task_id: str, default: Any = None) -> Any:  # type: ignore[override]
        if task_id not in self:
            self[task_id] = default
        return self[task_id]

    def popitem(self) -> tuple[str, int]:
        task_id, size = super().popitem()
        self.bytes -= size
        return task_id, size

    def clear(self) -> None:
        super().clear()
        self.bytes = 0

    def __ior__(self, other: Any) -> TaskSizes:  # type: ignore[override, misc]
        self.update(other)
        return self


@dataclass
class CallerBooks:
    """One caller's stored tasks (task_id -> bytes) and team bytes."""

    tasks: TaskSizes = field(default_factory=TaskSizes)
    # memory store: when each task was seen finished (time.time()), for retention
    finished_at: dict[str, float] = field(default_factory=dict)
    team_bytes: int = 0
    team_measured: float = 0.0
    # Uploads of requests past the check and not yet stored (`messaging.admit`): counted at once, so
    # uploads sent together cannot all pass the check before any is stored.
    reserved: int = 0
    read_at: float = 0.0  # time.monotonic() of the last read from the store (`reread`)

    @property
    def total(self) -> int:
        return self.tasks.bytes + self.team_bytes + self.reserved

    def seen(self) -> tuple[dict[str, int], int]:
        """What the books hold before a read from the store (`reread`'s `before`)."""
        return dict(self.tasks), self.team_bytes

    def reread(self, loaded: CallerBooks, before: tuple[dict[str, int], int]) -> None:
        """Take the tasks and team bytes of a new read from the store (what was removed
        outside this server, such as by `mail db-prune`, leaves the books); what only this
        server knows (uploads under way, finished_at) stays, and so does what changed here
        while the store was read (`before`, from `seen`): a task booked or measured then,
        one forgotten then, team bytes added then are newer than the read."""
        tasks, team_bytes = before
        fresh = dict(loaded.tasks)
        for task_id in tasks.keys() - self.tasks.keys():
            fresh.pop(task_id, None)
        for task_id, size in self.tasks.items():
            if tasks.get(task_id) != size:
                fresh[task_id] = size
        self.tasks.clear()
        self.tasks.update(fresh)
        if self.team_bytes == team_bytes:
            self.team_bytes, self.team_measured = loaded.team_bytes, loaded.team_measured
        self.read_at = loaded.read_at


class StorageQuota:
    """The books of every caller of one server, and the check a new message goes through."""

    def __init__(self, max_bytes: int, max_tasks: int) -> None:
        self.max_bytes = max_bytes  # 0 = no bound
        self.max_tasks = max_tasks
        self._books: dict[Owner, CallerBooks] = {}
        self._loading: dict[Owner, asyncio.Task[CallerBooks]] = {}

    def books(self, owner: Owner) -> CallerBooks | None:
        return self._books.get(owner)

    def all_books(self) -> dict[Owner, CallerBooks]:
        return self._books

    async def ensure(
        self, owner: Owner, load: Callable[[], Awaitable[CallerBooks]] | None = None
    ) -> CallerBooks:
        """The caller's books, read with `load` once (single-flight per caller)."""
        books = self._books.get(owner)
        if books is not None and (books.read_at or load is None):
            return books
        if load is None:
            books = self._books[owner] = CallerBooks()
            return books
        pending = self._loading.get(owner)
        if pending is None:
            pending = self._loading[owner] = asyncio.ensure_future(load())
        try:
            loaded = await asyncio.shield(pending)
        finally:
            if pending.done():
                self._loading.pop(owner, None)
        books = self._books.setdefault(owner, loaded)
        if books is not loaded and not books.read_at:
            # Booked here before the store was read (a task of the caller that ended before
            # its first message, such as one cancelled): what the store keeps counts too.
            books.reread(loaded, ({}, -1 if books.team_measured else books.team_bytes))
        return books

    def book(self, owner: Owner, task_id: str, size: int) -> None:
        """`size` bytes a task just stored (negative: gave back), on top of its figure."""
        tasks = self._books.setdefault(owner, CallerBooks()).tasks
        tasks[task_id] = max(0, tasks.get(task_id, 0) + int(size))

    def book_outcome(self, scope: Any, task_id: str, size: int) -> None:
        """A stored idempotency outcome (`scope`: the caller's key scope, an InstanceKey)
        of the key that started or continued `task_id`: the task's, as the store counts it."""
        self.book((instance_kind(scope.caller_role), scope.caller_id), task_id, size)

    def refusal(self, owner: Owner, size: int) -> str | None:
        """Why `size` more bytes would pass the caller's byte bound; None when they fit.
        With `size` 0: why the caller is past it already."""
        books = self._books.get(owner)
        total = books.total if books is not None else 0
        if not self.max_bytes or total + size <= self.max_bytes:
            return None
        taken, bound = human_bytes(total), human_bytes(self.max_bytes)
        if size:
            head = (
                f"it would store {human_bytes(size)} more; your tasks, files and team data "
                f"take {taken} of the {bound} one caller may store"
            )
        else:
            head = (
                f"your tasks, files and team data take {taken}, more than the {bound} one "
                "caller may store"
            )
        return f"{head} ([server.store] max_stored_bytes_per_caller = {self.max_bytes}); {FREED_BY}"

    def record(
        self, owner: Owner, task_id: str, size: int, finished_at: float | None = None
    ) -> None:
        books = self._books.setdefault(owner, CallerBooks())
        books.tasks[task_id] = max(0, int(size))
        if finished_at is not None:
            books.finished_at[task_id] = finished_at

    def set_team(self, owner: Owner, size: int) -> None:
        books = self._books.setdefault(owner, CallerBooks())
        books.team_bytes = max(0, int(size))
        books.team_measured = time.monotonic()

    def add_team(self, owner: Owner, size: int) -> None:
        """Team bytes just stored (a caller's uploads): counted at once, so uploads sent one
        after another cannot pass the bound between two measurements; the next measurement
        (`set_team`) replaces the figure with the store's."""
        books = self._books.setdefault(owner, CallerBooks())
        books.team_bytes += max(0, int(size))

    def team_due(self, owner: Owner) -> bool:
        books = self._books.get(owner)
        return books is None or time.monotonic() - books.team_measured >= TEAM_MEASURE_INTERVAL

    def forget(self, owner: Owner, task_ids: Iterable[str]) -> None:
        books = self._books.get(owner)
        if books is None:
            return
        for task_id in task_ids:
            books.tasks.pop(task_id, None)
            books.finished_at.pop(task_id, None)

    def at_bound(self, books: CallerBooks) -> bool:
        """Whether the caller is at either bound, or within a tenth of the byte bound (its
        next message may be refused)."""
        if self.max_tasks and len(books.tasks) >= self.max_tasks:
            return True
        return bool(self.max_bytes) and books.total >= self.max_bytes - self.max_bytes // 10


class CallerLedger:
    """One caller's books as its runtime sees them (`mail.core.stored_bytes.Ledger`)."""

    __slots__ = ("quota", "owner")

    def __init__(self, quota: StorageQuota, owner: Owner) -> None:
        self.quota = quota
        self.owner = owner

    def book(self, task_id: str, size: int) -> None:
        self.quota.book(self.owner, task_id, size)

    def book_team(self, size: int) -> None:
        self.quota.add_team(self.owner, size)

    def refusal(self, size: int) -> str | None:
        return self.quota.refusal(self.owner, size)


def summary_of(task: MAILTask) -> dict[str, Any]:
    """What a task list shows of a task beyond its record (kept with the stored record),
    and the bytes of the files it wrote (counted with what its rows hold)."""
    summary = {
        "event_count": len(task.events),
        "usage": task_usage(task).total.as_dict(),
        **task_listing.preview(task),
    }
    if task.files:
        summary["file_bytes"] = files_bytes(task)
    return summary


def files_bytes(task: MAILTask) -> int:
    """The bytes of the files the task's actions wrote (`MAILTask.files`)."""
    return sum(kept[0] for kept in task.files.values())


def listed_record(record: dict[str, Any], summary: dict[str, Any] | None) -> dict[str, Any]:
    """A stored task's row in GET /tasks, shaped like a live task's (`task_reads.task_summary`)."""
    out: dict[str, Any] = MAILTask.from_store_record(record).to_dict(include_events=False)
    summary = summary or {}
    out["event_count"] = int(record.get("event_count") or summary.get("event_count") or 0)
    out["pending_breakpoints"] = []
    out["usage"] = summary.get("usage") or dict(_EMPTY_USAGE)
    for name in ("first_message", "answer", "duration_s"):
        out[name] = summary.get(name)
    return out


def message_bytes(task: MAILTask) -> int:
    """A quick lower bound of what a task stores: the bodies of the messages it recorded."""
    size = 0
    for event in task.events:
        message = event.extra_data.get("full_message")
        if isinstance(message, dict):
            body = (message.get("message") or {}).get("body")
            size += len(body) if isinstance(body, str) else 0
    return size


def measure_in_memory(task: MAILTask, runtime: Any) -> int:
    """About what a task would store (the memory store's size; nothing is encoded): the
    bodies of its messages, the text of its agents' histories and its answer."""
    size = message_bytes(task)
    histories = runtime.agent_histories
    if isinstance(histories, AgentHistories):  # the task's own keys, not a scan of all
        own = histories.of_task(task.task_id)
    else:
        prefix = f"{task.task_id}::"
        own = [(k, h) for k, h in histories.items() if k.startswith(prefix)]
    for _, history in own:
        size += sum(_text_size(entry) for entry in history)
    response = task.response if isinstance(task.response, dict) else {}
    body = (response.get("message") or {}).get("body")
    return size + (len(body) if isinstance(body, str) else 0) + files_bytes(task)


def _text_size(entry: Any) -> int:
    if not isinstance(entry, dict):
        return len(str(entry))
    size = 0
    for value in entry.values():
        if isinstance(value, str):
            size += len(value)
        elif isinstance(value, list | dict):
            size += sum(_text_size(v) for v in (value if isinstance(value, list) else [value]))
    return size


def _libc_trim() -> Any:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: its allocator returns memory its own way
        return None


_TRIM = _libc_trim()


def give_back_memory() -> None:
    """Ask glibc to hand the heap pages freed by let-go tasks back to the system: large
    messages are freed in the middle of the heap, which glibc keeps for reuse otherwise."""
    if _TRIM is not None:
        _TRIM(0)


class FinishedTasks:
    """The server's finished tasks: letting them go, measuring them, reading them back."""

    def __init__(
        self, instances: InstanceManager, store: Any, quota: StorageQuota, team_store: Any = None
    ) -> None:
        self.instances = instances
        self.quota = quota
        self.team_store = team_store
        self.lifecycle = lifecycle_for(store) if store is not None else None
        # (owner, task id): answered tasks to let go (and since when), finished tasks waiting
        # to be measured and have their summary saved
        self._answered: dict[tuple[Owner, str], tuple[Instance, float]] = {}
        self._pending: dict[tuple[Owner, str], tuple[Instance, dict[str, Any] | None]] = {}
        self._seen: dict[tuple[Owner, str], float] = {}  # first seen finished (sweep)
        self._wake = asyncio.Event()
        self._freed = 0  # bytes of messages let go of since memory was last given back
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._save_delay = SAVE_INTERVAL  # longer while saving fails (`_saved`)
        # Held by a retention batch (`Retention`) and by `bring_back`: a finished task put
        # back for a new message is either removed before it is read (the message is then
        # for an unknown task) or read and marked changed before the next batch looks, never
        # removed from the store while a continuation runs from memory.
        self.prune_gate = asyncio.Lock()

    def key(self, kind: str, caller_id: str) -> InstanceKey:
        return InstanceKey(self.instances.swarm_name, kind, caller_id)

    # -- letting go ----------------------------------------------------------------------
    def answered(self, inst: Instance, task_id: str | None) -> None:
        """The caller has the task's answer: it is counted in the caller's books at once and
        let go as soon as nothing works on it any more (the turn that answered may still be
        winding down), in the background; measured and summarised there."""
        task = self.count(inst, task_id)
        if task is None or task_id is None:
            return
        # Another swarm may still be told about the end of a task it took part in: the
        # sweep lets such a task go after its grace.
        if not task.remote_swarms:
            if not self._answered:  # otherwise the worker comes back within RETRY_INTERVAL
                self._wake.set()
            self._answered[(inst.key, task_id)] = (inst, time.monotonic())

    def count(self, inst: Instance, task_id: str | None) -> MAILTask | None:
        """A finished task goes into its caller's books now, by its messages' bytes (the
        caller's next message may come before the task leaves memory and is measured; a task
        answered through A2A stays until the sweep). The task, or None when it is not a
        finished task of the instance."""
        if task_id is None:
            return None
        task = inst.swarm.runtime.mail_tasks.get(task_id)
        if task is None or not is_finished(task):
            return None
        books = self.quota.books(inst.key)
        if books is None or task_id not in books.tasks:
            self.quota.record(inst.key, task_id, message_bytes(task))
        return task

    def book_archived(self, inst: Instance) -> None:
        """Memory store: an instance reclaimed while idle; its tasks are archived, in no
        instance the sweep looks at. Its finished tasks not booked yet (a dropped stream's,
        a cancelled one's: nobody was answered with them) go into the books now, as the
        sweep would have put them: the quota counts them, retention expires them."""
        books = self.quota.books(inst.key)
        done = books.finished_at if books is not None else {}
        runtime = inst.swarm.runtime
        now = time.time()
        for task_id, task in list(runtime.mail_tasks.items()):
            if task_id not in done and is_finished(task):
                size = measure_in_memory(task, runtime)
                self.quota.record(inst.key, task_id, size, finished_at=now)

    def _take_answered(self) -> None:
        now = time.monotonic()
        answered, self._answered = self._answered, {}
        for (owner, task_id), (inst, at) in answered.items():
            runtime = inst.swarm.runtime
            task = runtime.mail_tasks.get(task_id)
            if task is None or task_id in inst.claimed_tasks or not is_finished(task):
                continue
            if self._let_go(inst, task_id, task):
                continue
            if now - at < SWEEP_GRACE:
                self._answered[(owner, task_id)] = (inst, at)  # again in a moment

    def _let_go(self, inst: Instance, task_id: str, task: MAILTask) -> bool:
        """Let a finished task go if nothing works on it any more (`can_forget`); whether
        it went."""
        summary = None  # the memory store keeps the task: measured from there
        if self.lifecycle is None:
            if not can_forget(inst.swarm.runtime, task_id):
                return False
        else:
            # forget_finished checks can_forget; the task it let go keeps its events and
            # answer, which the summary reads
            if forget_finished(inst.swarm.runtime, task_id) is None:
                return False
            summary = summary_of(task)
        self._pending[(inst.key, task_id)] = (inst, summary)
        self._seen.pop((inst.key, task_id), None)
        books = self.quota.books(inst.key)
        size = message_bytes(task)
        if summary is not None:  # it left memory
            self._freed += size
        if books is None or task_id not in books.tasks:
            self.quota.record(inst.key, task_id, size)  # until measured
        self._wake.set()
        return True

    def sweep(self, now: float | None = None) -> None:
        """Finished tasks nobody waited for: let go after `SWEEP_GRACE` seconds."""
        now = time.monotonic() if now is None else now
        seen: dict[tuple[Owner, str], float] = {}
        measured = self.quota.all_books()
        for inst in self.instances.all():
            runtime = inst.swarm.runtime
            books = measured.get(inst.key)
            for task_id, task in list(runtime.mail_tasks.items()):
                if not is_finished(task) or task_id in inst.claimed_tasks:
                    continue
                if self.lifecycle is None and books is not None and task_id in books.finished_at:
                    continue  # memory store: measured already, stays in memory
                first = self._seen.get((inst.key, task_id), now)
                seen[(inst.key, task_id)] = first
                if now - first >= SWEEP_GRACE and self._let_go(inst, task_id, task):
                    seen.pop((inst.key, task_id), None)
        self._seen = seen

    async def run(self) -> None:
        """Measure and summarise what was let go; sweep; until `close`."""
        last_sweep = last_save = last_trim = time.monotonic()
        while not self._closing:
            if self._answered:  # soon again: their last turn is still winding down
                timeout = RETRY_INTERVAL
            elif self._pending:
                timeout = max(0.0, self._save_delay - (time.monotonic() - last_save))
            else:
                timeout = SWEEP_INTERVAL
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0)  # the answering turn's own end comes first
            try:
                self._take_answered()  # memory goes back at once
                now = time.monotonic()
                if now - last_sweep >= SWEEP_INTERVAL:
                    last_sweep = now
                    self.sweep()
                if self._pending and now - last_save >= self._save_delay:
                    last_save = now
                    try:
                        await self.save_pending()
                    except Exception as exc:
                        self._saved(exc)
                    else:
                        self._saved(None)
                idle = not (self._pending or self._answered)
                due = self._freed >= TRIM_AFTER_BYTES or (idle and self._freed >= TRIM_IDLE_BYTES)
                if due and now - last_trim >= TRIM_INTERVAL:
                    self._freed, last_trim = 0, now
                    give_back_memory()
            except Exception:
                logger.exception("error while storing finished tasks' summaries")

    def _saved(self, error: Exception | None) -> None:
        """Back off while saving fails, with one line when it starts to: the store's own
        writer retries and logs its writes, /health says why; this waits for it (a read
        of a store that does not take writes fails at once, `TaskStore.settle`)."""
        if error is None:
            self._save_delay = SAVE_INTERVAL
            return
        if self._save_delay == SAVE_INTERVAL:
            logger.warning(
                "cannot store the summaries of %d finished task(s) yet (%s: %s); trying "
                "again every %g s at most",
                len(self._pending),
                type(error).__name__,
                " ".join(str(error).split()),
                SAVE_RETRY_MAX,
            )
        self._save_delay = min(self._save_delay * 2, SAVE_RETRY_MAX)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="mail-finished-tasks")

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await asyncio.shield(self._task)
            if not self._task.done():
                self._task.cancel()
            self._task = None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await self.save_pending()

    async def save_pending(self) -> None:
        """One batch per caller: sizes from the store (or memory), summaries into records."""
        pending, self._pending = self._pending, {}
        by_owner: dict[Owner, dict[str, tuple[Instance, dict[str, Any] | None]]] = {}
        for (owner, task_id), item in pending.items():
            by_owner.setdefault(owner, {})[task_id] = item
        owners = list(by_owner.items())
        for done, (owner, tasks) in enumerate(owners):
            try:
                if self.lifecycle is None:
                    now = time.time()
                    for task_id, (inst, _) in tasks.items():
                        task = inst.swarm.runtime.mail_tasks.get(task_id)
                        if task is not None:
                            size = measure_in_memory(task, inst.swarm.runtime)
                            self.quota.record(owner, task_id, size, finished_at=now)
                else:
                    await self._save(owner, tasks)
                await self.measure_team(owner)
            except Exception:
                # Kept for the next round (the store fails: the tasks are in it anyway).
                for later, rest in owners[done:]:
                    for task_id, item in rest.items():
                        self._pending.setdefault((later, task_id), item)
                raise

    async def _save(
        self, owner: Owner, tasks: dict[str, tuple[Instance, dict[str, Any] | None]]
    ) -> None:
        assert self.lifecycle is not None
        key = self.key(*owner)
        sizes = await self.lifecycle.task_bytes(key, list(tasks))
        summaries = {}
        for task_id, (_inst, summary) in tasks.items():
            size = sizes.get(task_id, 0) + int((summary or {}).get("file_bytes") or 0)
            self.quota.record(owner, task_id, size)
            if summary is not None:
                summary["stored_bytes"] = size
                summaries[task_id] = summary
        await self.lifecycle.save_summaries(key, summaries)

    async def measure_team(self, owner: Owner, *, force: bool = False) -> None:
        """The caller's team data measured from the store (at most every
        `TEAM_MEASURE_INTERVAL` unless `force`). Only under a byte bound: the figure is for
        `max_stored_bytes_per_caller` alone, and measuring reads every byte of the caller's
        threads, posts, inbox entries and attachment records (as a finished task's sizes
        are read only for the byte bound's books)."""
        if self.team_store is None or not self.quota.max_bytes:
            return
        if not (force or self.quota.team_due(owner)):
            return
        self.quota.set_team(owner, await self.team_store.stored_bytes(self.key(*owner)))

    def unsaved_summary(self, owner: Owner, task_id: str) -> dict[str, Any] | None:
        item = self._pending.get((owner, task_id))
        return item[1] if item is not None else None

    # -- the caller's books ----------------------------------------------------------------
    async def books(
        self, kind: str, caller_id: str, inst: Instance | None = None, put_back: str | None = None
    ) -> CallerBooks:
        """The caller's books, read from the store the first time (sizes kept with each
        record; tasks without one, such as running ones, are measured). With `inst` and
        `put_back` (a message's admission): that finished task is put back first."""
        if inst is not None and put_back is not None:
            await self.bring_back(inst, put_back)
        owner = inst.key if inst is not None else (instance_kind(kind), caller_id)

        async def load() -> CallerBooks:
            books = CallerBooks()
            if self.lifecycle is not None:
                key = self.key(*owner)
                records = await self.lifecycle.records(key)
                unknown = []
                for task_id, record in records.items():
                    size = (stored_summary(record) or {}).get("stored_bytes")
                    if isinstance(size, int):
                        books.tasks[task_id] = size
                    else:
                        unknown.append(task_id)
                for task_id, size in (await self.lifecycle.task_bytes(key, unknown)).items():
                    books.tasks[task_id] = size + task_files_bytes(records[task_id])
            if self.team_store is not None and self.quota.max_bytes:  # (`measure_team`)
                books.team_bytes = await self.team_store.stored_bytes(self.key(*owner))
                books.team_measured = time.monotonic()
            books.read_at = time.monotonic()
            return books

        books = await self.quota.ensure(owner, load)
        if (
            self.lifecycle is not None
            and self.quota.at_bound(books)
            and time.monotonic() - books.read_at >= REREAD_AT_BOUND
        ):
            books.read_at = time.monotonic()  # one read at a time per caller
            before = books.seen()  # (what is booked meanwhile is newer than the read)
            books.reread(await load(), before)
        self._count_unbooked(owner, books, inst)
        return books

    def _count_unbooked(self, owner: Owner, books: CallerBooks, inst: Instance | None) -> None:
        """Finished tasks of the caller's instance not in its books yet go in now: a task
        nobody was answered with (its stream dropped, answered through another swarm or
        after a restart) stays until the sweep lets it go, a few seconds, and no longer
        counts among the open tasks either; a caller sending in a loop would pass its bound
        by what it finished in that time.
        """
        if not (self.quota.max_tasks or self.quota.max_bytes):
            return  # no bound to check: the sweep books them as it lets them go
        inst = inst or self.instances.peek(*owner)
        if inst is None:
            return
        runtime = inst.swarm.runtime
        tasks = runtime.mail_tasks
        # (Tasks of an instance reclaimed while idle stay booked and archived, in no instance:
        # not among the books this instance's tasks are compared with.)
        archived = self.instances.archived_tasks(*owner) if self.lifecycle is None else ()
        if self.lifecycle is None and len(tasks) - len(runtime.open_tasks.ids()) <= len(
            books.tasks
        ) - len(archived):
            return
        for task_id, task in list(tasks.items()):
            if task_id not in books.tasks and is_finished(task):
                self.quota.record(owner, task_id, message_bytes(task))

    # -- reading back ----------------------------------------------------------------------
    async def stored_task(self, kind: str, caller_id: str, task_id: str) -> MAILTask | None:
        """A task of the (kind, id) instance from the store (None: none, or no store)."""
        if self.lifecycle is None or task_id == "*":
            return None
        snapshot = await self.lifecycle.load_tasks(
            self.key(instance_kind(kind), caller_id), [task_id]
        )
        return task_from_snapshot(snapshot, task_id)

    async def owners(self, task_id: str) -> list[InstanceKey]:
        if self.lifecycle is None or task_id == "*":
            return []
        return [
            k
            for k in await self.lifecycle.owners(task_id)
            if k.swarm_name == self.instances.swarm_name
        ]

    async def stored_callers(self, kind: str) -> list[str]:
        """Ids of the callers of `kind` with tasks in the store (none without a store)."""
        if self.lifecycle is None:
            return []
        return await self.lifecycle.callers(self.instances.swarm_name, instance_kind(kind))

    async def stored_summaries(
        self,
        kind: str,
        caller_id: str,
        live: Iterable[str] = (),
        *,
        limit: int | None = None,
        before: tuple[str, str] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """GET /tasks rows of the caller's stored tasks that are not in `live`: all of them,
        or (with `limit`) the newest `limit` before the cursor `before`."""
        if self.lifecycle is None:
            return {}
        owner = (instance_kind(kind), caller_id)
        key = self.key(*owner)
        skip = set(live)
        # One more than a page tells whether another page follows; live ones are stored too.
        wanted = None if limit is None else limit + 1 + len(skip)
        records = await self.lifecycle.records(key, limit=wanted, before=before)
        rows: dict[str, dict[str, Any]] = {}
        healed = 0
        for task_id, record in records.items():
            if task_id in skip:
                continue
            summary = stored_summary(record) or self.unsaved_summary(owner, task_id)
            if summary is None and record_is_finished(record) and healed < HEAL_PER_PAGE:
                # Finished before summaries were kept (or just before a crash): once.
                summary = await self._heal(key, task_id)
                healed += 1
            rows[task_id] = listed_record(record, summary)
        return rows

    async def _heal(self, key: InstanceKey, task_id: str) -> dict[str, Any] | None:
        assert self.lifecycle is not None
        task = await self.stored_task(key.caller_role, key.caller_id, task_id)
        if task is None:
            return None
        summary = summary_of(task)
        size = (await self.lifecycle.task_bytes(key, [task_id])).get(task_id, 0)
        summary["stored_bytes"] = size + files_bytes(task)
        await self.lifecycle.save_summaries(key, {task_id: summary})
        return summary

    async def bring_back(self, inst: Instance, task_id: str | None) -> bool:
        """A message names a task the instance does not hold: put it back from the store."""
        if self.lifecycle is None or task_id is None:
            return False
        runtime = inst.swarm.runtime
        if task_id in runtime.mail_tasks:
            return False
        async with self.prune_gate:
            snapshot = await self.lifecycle.load_tasks(self.key(inst.kind, inst.id), [task_id])
            if task_id in runtime.mail_tasks or task_id not in snapshot.tasks:
                return False  # another request put it back meanwhile, or it is unknown
            if not restore_task(inst.swarm, snapshot):
                return False
            # Its record changed now (committed before a retention batch can look again):
            # a task past finished_task_ttl that gets a message is not removed under it
            # (the batch removed its events while the continuation ran: half a task stored).
            task = runtime.mail_tasks.get(task_id)
            if task is not None:
                runtime.observer.task_changed(task)
                await inst.swarm.flush_store(BRING_BACK_FLUSH_SECONDS)
            return True
