"""Retention: finished tasks older than [server.store] finished_task_ttl are removed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from mail.core.file_root import remove_task_files
from mail.core.finished_tasks import forget_finished
from mail.server.finished_tasks import FinishedTasks, Owner
from mail.server.instances import InstanceManager
from mail.store.base import InstanceKey
from mail.store.lifecycle import PruneReport, cutoff_for

logger = logging.getLogger("mail.server")

# Free space in the SQLite file past which a round gives pages back to the file system.
RECLAIM_FREE_BYTES = 4 * 1024 * 1024


@dataclass
class RoundReport:
    tasks: int = 0
    rows: int = 0
    batches: int = 0
    team_rows: int = 0
    reclaimed_bytes: int = 0


class Retention:
    """The background rounds of one server."""

    def __init__(
        self,
        finished: FinishedTasks,
        instances: InstanceManager,
        *,
        ttl: float,
        interval: float,
    ) -> None:
        self.finished = finished
        self.instances = instances
        self.ttl = ttl
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self.rounds = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="mail-retention")

    async def close(self) -> None:
        self._closing.set()
        if self._task is not None:
            try:
                async with asyncio.timeout(10):
                    await asyncio.shield(self._task)
            except (TimeoutError, Exception):
                self._task.cancel()
            self._task = None

    async def _loop(self) -> None:
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._closing.wait()
            if self._closing.is_set():
                return
            try:
                report = await self.run_round()
            except Exception:
                logger.exception("retention round failed (tried again in %.0fs)", self.interval)
                continue
            if report.tasks or report.team_rows or report.reclaimed_bytes:
                logger.info(
                    "retention: removed %d finished task(s) (%d rows) in %d batch(es), "
                    "%d team row(s); %d bytes returned to the file system",
                    report.tasks,
                    report.rows,
                    report.batches,
                    report.team_rows,
                    report.reclaimed_bytes,
                )

    async def run_round(self) -> RoundReport:
        """One round: expired tasks and team rows removed, space given back."""
        self.rounds += 1
        report = RoundReport()
        lifecycle = self.finished.lifecycle
        if self.ttl > 0:
            cutoff = cutoff_for(self.ttl)
            if lifecycle is not None:
                pruned = PruneReport()
                while True:
                    # One batch at a time, with no task put back from the store meanwhile
                    # (`FinishedTasks.prune_gate`); messages get in between batches.
                    async with self.finished.prune_gate:
                        batch = await lifecycle.prune(cutoff, max_batches=1)
                    if not batch.tasks:
                        break
                    pruned.add(batch)
                self._forget(pruned)
                await asyncio.to_thread(remove_task_files, pruned.files)
                report.tasks, report.rows = len(pruned.tasks), pruned.rows
                report.batches = pruned.batches
            else:
                files: dict[str, Any] = {}
                report.tasks = self._expire_in_memory(time.time() - self.ttl, files)
                await asyncio.to_thread(remove_task_files, files)
            team = self.finished.team_store
            if team is not None:
                live = self._kept_tasks(time.time() - self.ttl) if lifecycle is None else ()
                report.team_rows = await team.prune_before(cutoff, live)
                if report.team_rows:
                    for owner in list(self.finished.quota.all_books()):
                        await self.finished.measure_team(owner, force=True)
        if lifecycle is not None:
            space = await lifecycle.space()
            if space.free_bytes >= RECLAIM_FREE_BYTES:
                report.reclaimed_bytes = await lifecycle.reclaim_space()
        return report

    def _forget(self, pruned: PruneReport) -> None:
        """Removed from the store: out of the books, and out of memory if still there."""
        by_owner: dict[Owner, list[str]] = {}
        for key, task_id in pruned.tasks:
            if key.swarm_name == self.instances.swarm_name:
                by_owner.setdefault((key.caller_role, key.caller_id), []).append(task_id)
        for owner, task_ids in by_owner.items():
            self.finished.quota.forget(owner, task_ids)
            inst = self.instances.peek(*owner)
            if inst is not None:
                for task_id in task_ids:
                    forget_finished(inst.swarm.runtime, task_id)

    def _kept_tasks(self, before: float) -> list[tuple[InstanceKey, str]]:
        """Memory store: the tasks of the live instances that are kept (they run or wait, or
        finished at `before` or later); their team posts, inbox entries and uploads stay,
        whatever their age, as long as the task does."""
        kept: list[tuple[InstanceKey, str]] = []
        for inst in self.instances.all():
            books = self.finished.quota.books(inst.key)
            done = books.finished_at if books is not None else {}
            key = self.finished.key(*inst.key)
            kept.extend(
                (key, t) for t in inst.swarm.runtime.mail_tasks if done.get(t, before) >= before
            )
        return kept

    def _expire_in_memory(self, before: float, files: dict[str, Any]) -> int:
        """Memory store: drop finished tasks seen finished before `before` (time.time());
        the files they wrote go into `files`."""
        removed = 0
        for owner, books in list(self.finished.quota.all_books().items()):
            expired = [t for t, at in books.finished_at.items() if at < before]
            if not expired:
                continue
            inst = self.instances.peek(*owner)
            archived = self.instances.archived_tasks(*owner)
            gone = []
            for task_id in expired:
                runtime: Any = inst.swarm.runtime if inst is not None else None
                if runtime is not None and task_id in runtime.mail_tasks:
                    task = forget_finished(runtime, task_id)
                    if task is None:
                        continue  # continued meanwhile: measured again when it finishes
                    files.update(task.files)
                record = archived.pop(task_id, None)
                files.update(getattr(record, "files", None) or {})
                gone.append(task_id)
            self.finished.quota.forget(owner, gone)
            removed += len(gone)
        return removed
