"""Team messaging on the server: the team store, user uploads, and what the team routes mean."""

from __future__ import annotations

import base64
import binascii
import logging
from typing import Any

from fastapi import HTTPException

from mail.config import ServerConfig
from mail.server.auth import Caller
from mail.server.errors import BadRequest, type_name
from mail.server.instances import instance_kind
from mail.store.base import InstanceKey
from mail.utils.echo import echo

logger = logging.getLogger("mail.server")

ATTACHMENT_FIELDS: tuple[str, ...] = ("filename", "content_base64", "content", "description")


def team_settings(config: ServerConfig) -> Any:
    from mail.core.team import TeamSettings

    cfg = config.team_tools
    return TeamSettings(
        reply_timeout=cfg.reply_timeout,
        reply_timeout_max=cfg.reply_timeout_max,
        max_attachment_bytes=cfg.max_attachment_bytes,
        max_read_bytes=cfg.max_read_bytes,
        files_root=cfg.files_root or None,  # unset: the [stdlib.fs] root
        max_body_chars=config.settings.max_message_body or 2**62,
        max_title_chars=cfg.max_title_chars,
        max_description_chars=cfg.max_description_chars,
        max_filename_chars=cfg.max_filename_chars,
        max_threads=cfg.max_threads,
        max_attachment_bytes_per_instance=cfg.max_attachment_bytes_per_instance,
    )


def uses_team_tools(template: Any) -> bool:
    return any(getattr(a, "team_tools", None) for a in getattr(template, "agents", []) or [])


def keeps_team_data(config: ServerConfig, template: Any) -> bool:
    """Whether team data (threads, inboxes, attachments) can be made: by the swarm's agents'
    team tools, or by outside agents joined over MCP ([server.mcp] enabled), whatever the
    swarm's agents use. Then it is kept in the task store's database, as the tasks are."""
    return uses_team_tools(template) or config.mcp.enabled


async def start_team_store(config: ServerConfig, template: Any, task_store: Any) -> Any:
    """The task store's database (SQLite or PostgreSQL) when the swarm uses team tools."""
    store = await _open_team_store(config, template, task_store)
    # Both stores keep the newest posts per thread and inbox entries per agent.
    store.max_posts_per_thread = config.team_tools.max_posts_per_thread
    store.max_inbox_entries = config.team_tools.max_inbox_entries
    return store


async def _open_team_store(config: ServerConfig, template: Any, task_store: Any) -> Any:
    if getattr(task_store, "backend", "") == "sqlite" and keeps_team_data(config, template):
        from mail.store.team_base import SqliteTeamStore

        lite = SqliteTeamStore(task_store.path)  # the same file (and writer thread)
        await lite.start()
        return lite
    if task_store is not None and getattr(task_store, "backend", "") == "postgres":
        if keeps_team_data(config, template):
            from mail.store import database_url_from_env
            from mail.store.team_base import PostgresTeamStore

            url = database_url_from_env()
            if url:
                store = PostgresTeamStore(url)
                await store.start()
                logger.info("team messaging: postgres")
                return store
    from mail.store.team_base import SqliteTeamStore

    memory = SqliteTeamStore()  # a private in-memory database
    await memory.start()
    return memory


def caller_key(swarm_name: str, caller: Caller) -> InstanceKey:
    return InstanceKey(swarm_name, instance_kind(caller.role), caller.id)


def _owner(key: InstanceKey) -> str:
    return f"{key.caller_role}:{key.caller_id}"


# ------------------------------------------------------------------ uploads
def parse_attachments(
    value: Any,
    max_bytes: int,
    *,
    max_filename_chars: int = 255,
    max_description_chars: int = 2000,
) -> list[tuple[str, str, bytes]]:
    """``[(filename, description, bytes)]`` from a POST /message ``attachments`` list."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"parameter 'attachments' must be a list, got {type_name(value)}")
    parsed = []
    for index, item in enumerate(value):
        where = f"attachments[{index}]"
        if not isinstance(item, dict):
            raise BadRequest(f"parameter '{where}' must be an object, got {type_name(item)}")
        unknown = sorted(set(item) - set(ATTACHMENT_FIELDS))
        if unknown:
            raise BadRequest(f"parameter '{where}.{unknown[0]}' is not a known field")
        filename = item.get("filename")
        if not isinstance(filename, str) or not filename.strip():
            raise BadRequest(f"parameter '{where}.filename' must be a non-empty string")
        if len(filename) > max_filename_chars:
            raise BadRequest(
                f"parameter '{where}.filename' is {len(filename)} characters; the limit is "
                f"{max_filename_chars} ([server.team_tools] max_filename_chars)"
            )
        encoded, text = item.get("content_base64"), item.get("content")
        if (encoded is None) == (text is None):
            raise BadRequest(f"parameter '{where}' needs exactly one of content_base64, content")
        if encoded is not None:
            if not isinstance(encoded, str):
                raise BadRequest(f"parameter '{where}.content_base64' must be a string")
            if len(encoded) * 3 // 4 > max_bytes + 3:
                raise HTTPException(413, f"{where} is too large; the limit is {max_bytes} bytes")
            try:
                data = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise BadRequest(
                    f"parameter '{where}.content_base64' is not base64: {exc}"
                ) from exc
        else:
            if not isinstance(text, str):
                raise BadRequest(f"parameter '{where}.content' must be a string")
            data = text.encode("utf-8")
        if len(data) > max_bytes:
            raise HTTPException(413, f"{where} is {len(data)} bytes; the limit is {max_bytes}")
        description = item.get("description") or ""
        if not isinstance(description, str):
            raise BadRequest(f"parameter '{where}.description' must be a string")
        if len(description) > max_description_chars:
            raise BadRequest(
                f"parameter '{where}.description' is {len(description)} characters; the limit "
                f"is {max_description_chars} ([server.team_tools] max_description_chars)"
            )
        parsed.append((filename, description, data))
    return parsed


async def store_uploads(
    swarm: Any,
    caller: Caller,
    task_id: str,
    uploads: list[tuple[str, str, bytes]],
    ids: list[str] | None = None,
    replacing: bool = False,
) -> list[dict[str, Any]]:
    """Store the user's files as attachments of the instance; their routing_info entries.

    `ids`: the attachment ids to store them under (a keyed request's, kept with its key):
    an attachment already stored under one (a first attempt that died before its task
    started) is replaced, and its bytes are not counted twice against the quota. Only
    with `replacing` (a takeover) are they looked for: a first attempt's ids are new."""
    if not uploads:
        return []
    from mail.core.team.files import EVERY_AGENT, attachment_meta, clean_filename, new_attachment

    team = getattr(swarm, "team", None)
    if team is None:
        raise BadRequest(
            'this swarm has no agent with file tools (team_tools: ["files"]); '
            "attachments cannot be delivered"
        )
    records = []
    for filename, description, data in uploads:
        try:
            name = clean_filename(filename, "upload")
        except Exception as exc:  # TeamError
            raise BadRequest(f"attachment filename: {exc}") from exc
        records.append(
            new_attachment(
                data, name, description, f"{caller.role}:{caller.id}", [EVERY_AGENT], task_id
            )
        )
    if ids is not None:
        for record, attachment_id in zip(records, ids, strict=True):
            record["attachment_id"] = attachment_id
    quota = team.settings.max_attachment_bytes_per_instance
    adding = sum(len(data) for _, _, data in uploads)
    async with team.quota_lock:  # the check and the writes it allows, as one step
        used = await team.store.attachment_bytes(team.key)
        for attachment_id in (ids or ()) if replacing else ():  # replaced: counted once
            earlier = await team.store.get_attachment(team.key, attachment_id, with_data=False)
            if earlier is not None:
                used -= int(earlier[0].get("size") or 0)
        if used + adding > quota:
            raise HTTPException(
                413,
                f"attachments of your swarm instance would take {used + adding} bytes, over "
                f"its quota of {quota} ([server.team_tools] max_attachment_bytes_per_instance)",
            )
        for record, (_, _, data) in zip(records, uploads, strict=True):
            await team.store.put_attachment(team.key, record, data)
    return [attachment_meta(record) for record in records]


# ------------------------------------------------------------------ reads
async def list_threads(store: Any, swarm_name: str, caller: Caller) -> dict[str, Any]:
    key = None if caller.role == "admin" else caller_key(swarm_name, caller)
    found = await store.list_threads(key)
    threads = [{**thread, "owner": _owner(k)} for k, thread in found if k.swarm_name == swarm_name]
    return {"threads": threads}


async def get_thread(store: Any, swarm_name: str, caller: Caller, thread_id: str) -> dict[str, Any]:
    own = caller_key(swarm_name, caller)
    candidates = [own]
    if caller.role == "admin":
        candidates += [k for k, t in await store.list_threads(None) if t["thread_id"] == thread_id]
    for key in candidates:
        thread = await store.get_thread(key, thread_id)
        if thread is None:
            continue
        posts = await store.thread_posts(key, thread_id)
        counts = await store.unread_counts(key, thread_id)
        unread = {
            agent: counts.get(agent, {}).get(thread_id, 0) for agent in thread["participants"]
        }
        return {**thread, "owner": _owner(key), "messages": posts, "unread": unread}
    raise HTTPException(404, f"thread '{echo(thread_id)}' not found")


async def get_attachment(
    store: Any, swarm_name: str, caller: Caller, attachment_id: str
) -> tuple[dict[str, Any], bytes]:
    found = await store.get_attachment(caller_key(swarm_name, caller), attachment_id)
    if found is None:
        raise HTTPException(404, f"attachment '{echo(attachment_id)}' not found")
    return found
