"""File tools: agent working folders, attachments (size cap, sha256) and their delivery.

Paths given by agents are relative to the instance's working folder
(`TeamService.files_root`); absolute paths are accepted only when they resolve inside it.
Symlinks are resolved before the check, so a link pointing outside is refused too.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath
from typing import Any

from mail.core.message import (
    MAILMessage,
    create_agent_address,
    make_message,
    make_request,
    utc_now_iso,
)
from mail.core.team import limits
from mail.core.team.service import TeamError, TeamService, new_id
from mail.store.team_base import Record

USER_RECIPIENTS = ("user",)
EVERY_AGENT = "*"


def resolve_inside(root: Path, path: Any) -> Path:
    """`path` (relative to `root`, or absolute) resolved; TeamError if it leaves `root`."""
    if not isinstance(path, str) or not path.strip():
        raise TeamError("a path is required")
    candidate = Path(path.strip())
    full = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if full != root and root not in full.parents:
        raise TeamError(f"path '{path}' is outside your working folder; use a relative path")
    return full


def clean_filename(name: Any, fallback: str) -> str:
    text = str(name).strip() if isinstance(name, str) and name.strip() else fallback
    base = PurePosixPath(text.replace("\\", "/")).name
    if base in ("", ".", ".."):
        raise TeamError(f"'{name}' is not a usable file name")
    return base


def attachment_meta(record: Record) -> dict[str, Any]:
    """The `{id, filename, size, sha256, description}` entry of `routing_info.attachments`."""
    return {
        "id": record["attachment_id"],
        "filename": record["filename"],
        "size": record["size"],
        "sha256": record["sha256"],
        "description": record.get("description") or "",
    }


def new_attachment(
    data: bytes,
    filename: str,
    description: str,
    sender: str,
    recipients: list[str],
    task_id: str,
) -> Record:
    return {
        "attachment_id": new_id("att"),
        "filename": filename,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "description": description,
        "sender": sender,
        "recipients": recipients,
        "task_id": task_id,
        "created_at": utc_now_iso(),
    }


def _is_user(team: TeamService, name: str) -> bool:
    return name in USER_RECIPIENTS or name == team.rt.user_id


async def transfer_file(
    team: TeamService,
    sender: str,
    task_id: str,
    recipient: Any,
    source_path: Any,
    destination_filename: Any = None,
    description: Any = None,
) -> tuple[Record, str]:
    """Store the file as an attachment and deliver it; returns (record, recipient)."""
    name = str(recipient or "").strip()
    to_user = _is_user(team, name)
    if not to_user:
        if name not in team.rt.agents or name == sender:
            valid = [a for a in team.rt.agents if a != sender]
            raise TeamError(
                f"unknown recipient '{name}'. Valid names: {', '.join([*valid, 'user'])}"
            )
    root = team.files_root()
    source = resolve_inside(root, source_path)
    if not source.is_file():
        raise TeamError(f"no file at '{source_path}' in your working folder")
    size = source.stat().st_size
    cap = team.settings.max_attachment_bytes
    if size > cap:
        raise TeamError(f"'{source_path}' is {size} bytes; attachments are limited to {cap}")
    filename = clean_filename(destination_filename, source.name)
    text = str(description) if isinstance(description, str) else ""
    limits.check_attachment_texts(team, filename, text)
    await limits.check_attachment_quota(team, size)
    data = source.read_bytes()
    target = "user" if to_user else name
    record = new_attachment(data, filename, text, sender, [target], task_id)
    await team.store.put_attachment(team.key, record, data)
    meta = attachment_meta(record)
    team.rt._emit(
        task_id,
        "attachment",
        f"agent {sender} sent file '{filename}' ({len(data)} bytes) to {target}",
        {
            "attachment": meta,
            "sender": sender,
            "recipient": target,
            "download": f"/attachments/{record['attachment_id']}",
        },
    )
    if not to_user:
        team.rt.mailbox.put(_file_message(team, sender, name, task_id, meta))
    return record, target


def _file_message(
    team: TeamService, sender: str, recipient: str, task_id: str, meta: dict[str, Any]
) -> MAILMessage:
    lines = [
        f"{sender} sent you the file '{meta['filename']}' ({meta['size']} bytes, "
        f"sha256 {meta['sha256']}), attachment id {meta['id']}.",
    ]
    if meta["description"]:
        lines.append(f"Description: {meta['description']}")
    lines.append("Use read_attachment or save_attachment with that id to get it.")
    payload = make_request(
        task_id,
        create_agent_address(sender),
        create_agent_address(recipient),
        f"File: {meta['filename']}",
        "\n".join(lines),
        routing_info={"attachments": [meta]},
    )
    message = make_message(payload, "request")
    team.rt._prechecked.add(message["id"])
    return message


async def _readable(team: TeamService, agent: str, attachment_id: Any) -> tuple[Record, bytes]:
    if not isinstance(attachment_id, str) or not attachment_id.strip():
        raise TeamError("attachment_id is required")
    found = await team.store.get_attachment(team.key, attachment_id.strip())
    if found is None:
        raise TeamError(f"unknown attachment '{attachment_id}'")
    record, data = found
    allowed = {record.get("sender"), *record.get("recipients", [])}
    if agent not in allowed and EVERY_AGENT not in allowed:
        raise TeamError(f"attachment '{attachment_id}' was not sent to you")
    return record, data


async def read_attachment(team: TeamService, agent: str, attachment_id: Any) -> str:
    record, data = await _readable(team, agent, attachment_id)
    cap = team.settings.max_read_bytes
    if len(data) > cap:
        raise TeamError(
            f"'{record['filename']}' is {len(data)} bytes, more than read_attachment shows "
            f"({cap}); use save_attachment and read it in parts"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise TeamError(
            f"'{record['filename']}' is binary, not UTF-8 text; use save_attachment instead"
        ) from None


async def save_attachment(team: TeamService, agent: str, attachment_id: Any, path: Any) -> str:
    record, data = await _readable(team, agent, attachment_id)
    root = team.files_root()
    target = resolve_inside(root, path)
    if target.is_dir():
        target = target / record["filename"]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return str(target.relative_to(root))
