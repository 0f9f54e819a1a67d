"""In-memory TeamStore; attachment bytes in memory or, with `attachments_dir`, in files."""

from __future__ import annotations

import copy
import datetime
import json
import os
from collections.abc import Collection, Iterable
from pathlib import Path

from mail.store.base import InstanceKey
from mail.store.team_base import InboxQuery, Record, TeamStore, cutoff_text


def _instance_dir(root: Path, key: InstanceKey) -> Path:
    safe = "-".join(part.replace(os.sep, "_") for part in (key.caller_role, key.caller_id))
    return root / key.swarm_name.replace(os.sep, "_") / safe


def _keep_newest(records: list[Record], limit: int | None) -> None:
    if limit is not None and len(records) > limit:
        del records[: len(records) - limit]


class MemoryTeamStore(TeamStore):
    """Everything in dicts; lost with the process (attachment files excepted)."""

    def __init__(self, attachments_dir: str | os.PathLike[str] | None = None) -> None:
        self._threads: dict[InstanceKey, dict[str, Record]] = {}
        self._posts: dict[tuple[InstanceKey, str], list[Record]] = {}
        self._inbox: dict[tuple[InstanceKey, str], list[Record]] = {}
        self._attachments: dict[InstanceKey, dict[str, tuple[Record, bytes]]] = {}
        self._dir = Path(attachments_dir) if attachments_dir else None

    # -- threads ---------------------------------------------------------------------
    async def save_thread(self, key: InstanceKey, thread: Record) -> None:
        self._threads.setdefault(key, {})[thread["thread_id"]] = copy.deepcopy(thread)

    async def get_thread(self, key: InstanceKey, thread_id: str) -> Record | None:
        found = self._threads.get(key, {}).get(thread_id)
        return copy.deepcopy(found) if found is not None else None

    async def list_threads(self, key: InstanceKey | None) -> list[tuple[InstanceKey, Record]]:
        keys = [key] if key is not None else list(self._threads)
        return [
            (k, copy.deepcopy(t))
            for k in keys
            for t in sorted(self._threads.get(k, {}).values(), key=lambda t: t["created_at"])
        ]

    async def count_threads(self, key: InstanceKey) -> int:
        return len(self._threads.get(key, {}))

    async def add_post(self, key: InstanceKey, post: Record) -> None:
        posts = self._posts.setdefault((key, post["thread_id"]), [])
        posts.append(copy.deepcopy(post))
        _keep_newest(posts, self.max_posts_per_thread)

    async def thread_posts(
        self, key: InstanceKey, thread_id: str, limit: int | None = None
    ) -> list[Record]:
        posts = self._posts.get((key, thread_id), [])
        chosen = posts[-limit:] if limit else posts
        return copy.deepcopy(chosen)

    # -- inboxes ---------------------------------------------------------------------
    async def add_inbox_entries(self, key: InstanceKey, entries: Iterable[Record]) -> None:
        for entry in entries:
            inbox = self._inbox.setdefault((key, entry["agent"]), [])
            inbox.append(copy.deepcopy(entry))
            _keep_newest(inbox, self.max_inbox_entries)

    async def select_inbox(self, key: InstanceKey, agent: str, query: InboxQuery) -> list[Record]:
        found = []
        entries = self._inbox.get((key, agent), [])
        for entry in entries if query.oldest_first else reversed(entries):
            if query.matches(entry):
                found.append(copy.deepcopy(entry))
                if query.limit is not None and len(found) >= query.limit:
                    break
        return found

    async def mark(
        self, key: InstanceKey, agent: str, entry_ids: Iterable[str], *, field: str
    ) -> None:
        wanted = set(entry_ids)
        for entry in self._inbox.get((key, agent), []):
            if entry["entry_id"] in wanted:
                entry[field] = True

    async def unread_counts(
        self, key: InstanceKey, thread_id: str | None = None
    ) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for (k, agent), entries in self._inbox.items():
            if k != key:
                continue
            for entry in entries:
                if entry.get("read"):
                    continue
                where = entry.get("thread_id") or "direct"
                if thread_id is not None and where != thread_id:
                    continue
                per = counts.setdefault(agent, {})
                per[where] = per.get(where, 0) + 1
        return counts

    # -- attachments -----------------------------------------------------------------
    async def put_attachment(self, key: InstanceKey, record: Record, data: bytes) -> None:
        stored = data
        if self._dir is not None:
            folder = _instance_dir(self._dir, key)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / record["attachment_id"]).write_bytes(data)
            stored = b""
        self._attachments.setdefault(key, {})[record["attachment_id"]] = (
            copy.deepcopy(record),
            stored,
        )

    async def attachment_bytes(self, key: InstanceKey) -> int:
        return sum(int(record["size"]) for record, _ in self._attachments.get(key, {}).values())

    async def get_attachment(
        self, key: InstanceKey, attachment_id: str, *, with_data: bool = True
    ) -> tuple[Record, bytes] | None:
        found = self._attachments.get(key, {}).get(attachment_id)
        if found is None:
            return None
        record, data = found
        if with_data and self._dir is not None:
            data = (_instance_dir(self._dir, key) / attachment_id).read_bytes()
        return copy.deepcopy(record), data if with_data else b""

    # -- lifecycle -------------------------------------------------------------------
    async def stored_bytes(self, key: InstanceKey) -> int:
        records: list[Record] = list(self._threads.get(key, {}).values())
        for (k, _), posts in self._posts.items():
            if k == key:
                records.extend(posts)
        for (k, _), entries in self._inbox.items():
            if k == key:
                records.extend(entries)
        size = sum(len(json.dumps(r, ensure_ascii=False).encode()) for r in records)
        return size + await self.attachment_bytes(key)

    async def prune_before(
        self, cutoff: datetime.datetime, live_tasks: Collection[tuple[InstanceKey, str]] = ()
    ) -> int:
        text = cutoff_text(cutoff)
        live = set(live_tasks)
        removed = 0
        for store in (self._posts, self._inbox):
            for place, records in list(store.items()):
                key = place[0]
                kept = [
                    r
                    for r in records
                    if str(r.get("timestamp", "")) >= text or (key, r.get("task_id")) in live
                ]
                removed += len(records) - len(kept)
                if kept:
                    store[place] = kept
                else:
                    del store[place]
        for key, attachments in list(self._attachments.items()):
            for attachment_id, (record, _data) in list(attachments.items()):
                if str(record.get("created_at", "")) < text and (
                    (key, record.get("task_id")) not in live
                ):
                    del attachments[attachment_id]
                    removed += 1
                    if self._dir is not None:
                        (_instance_dir(self._dir, key) / attachment_id).unlink(missing_ok=True)
        for key, threads in list(self._threads.items()):
            for thread_id, thread in list(threads.items()):
                changed = str(thread.get("updated_at") or thread.get("created_at") or "")
                if changed < text and (key, thread_id) not in self._posts:
                    del threads[thread_id]
                    removed += 1
        return removed
