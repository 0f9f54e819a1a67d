"""File tools: agent working folders, attachments (size cap, sha256) and their delivery."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath
from typing import Any

from mail.core.message import (
    MAILMessage,
    create_agent_address,
    make_message,
    make_request,
    utc_now_iso,
)
from mail.core.stored_bytes import current_task_files, text_bytes
from mail.core.team import limits
from mail.core.team.service import TeamError, TeamService, new_id
from mail.store.base import StoreUnavailableError
from mail.store.team_base import Record
from mail.utils.safe_files import (
    OutsideRoot,
    UnsafePath,
    entry_parts,
    is_dir,
    is_link,
    is_regular,
    lstat_entry,
    parent_dir,
    read_regular,
    write_regular,
)

USER_RECIPIENTS = ("user",)
EVERY_AGENT = "*"


def path_parts(root: Path, path: Any) -> list[str]:
    """The components of `path` below `root` (relative, or absolute inside it); TeamError else."""
    if not isinstance(path, str) or not path.strip():
        raise TeamError("a path is required")
    try:
        return entry_parts(root, path.strip())
    except OutsideRoot:
        raise TeamError(
            f"path '{path}' is outside your working folder; use a relative path"
        ) from None
    except UnsafePath as exc:
        raise TeamError(str(exc)) from None


def _read_source(root: Path, parts: list[str], shown: str, cap: int) -> bytes:
    """The bytes of a regular file in the working folder (links refused), at most `cap`."""
    missing = TeamError(f"no file at '{shown}' in your working folder")
    if not parts:
        raise missing
    try:
        with parent_dir(root, parts) as folder:
            entry = lstat_entry(folder, parts[-1])
            if entry is None or not (is_regular(entry) or is_link(entry)):
                raise missing
            if is_regular(entry) and entry.st_size > cap:
                raise TeamError(
                    f"'{shown}' is {entry.st_size} bytes; attachments are limited to {cap}"
                )
            data = read_regular(folder, parts[-1], shown, cap)
    except FileNotFoundError:
        raise missing from None
    except UnsafePath as exc:
        raise TeamError(str(exc)) from None
    if len(data) > cap:
        raise TeamError(f"'{shown}' is over {cap} bytes; attachments are limited to {cap}")
    return data


def _write_target(
    root: Path, parts: list[str], filename: str, data: bytes
) -> tuple[list[str], os.stat_result]:
    """Write `data` at `parts` (into it, named `filename`, when it is a folder); links
    refused. The parts written and the file's stat."""
    try:
        if parts:
            with parent_dir(root, parts, create=True) as folder:
                into_folder = is_dir(lstat_entry(folder, parts[-1]))
        else:
            into_folder = True
        if into_folder:
            parts = [*parts, filename]
        shown = "/".join(parts)
        with parent_dir(root, parts, create=True) as folder:
            entry = lstat_entry(folder, parts[-1])
            if entry is not None and not (is_regular(entry) or is_link(entry)):
                raise TeamError(f"'{shown}' exists and is not a file")
            stat = write_regular(folder, parts[-1], shown, data)
    except UnsafePath as exc:
        raise TeamError(str(exc)) from None
    except OSError as exc:
        raise TeamError(f"cannot write '{'/'.join(parts)}': {exc.strerror or exc}") from None
    return parts, stat


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


def is_user_recipient(team: TeamService, name: str) -> bool:
    """Does `name` address the swarm's user (files to it are stored, not messaged)?"""
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
    _check_recipient(team, sender, recipient)
    root = team.files_root()
    parts = path_parts(root, source_path)
    data = _read_source(root, parts, str(source_path), team.settings.max_attachment_bytes)
    filename = clean_filename(destination_filename, parts[-1])
    return await send_bytes(team, sender, task_id, recipient, data, filename, description)


def _check_recipient(team: TeamService, sender: str, recipient: Any) -> None:
    name = str(recipient or "").strip()
    if not is_user_recipient(team, name) and (name not in team.rt.agents or name == sender):
        valid = [a for a in team.rt.agents if a != sender]
        raise TeamError(f"unknown recipient '{name}'. Valid names: {', '.join([*valid, 'user'])}")


async def send_bytes(
    team: TeamService,
    sender: str,
    task_id: str,
    recipient: Any,
    data: bytes,
    filename: str,
    description: Any = None,
) -> tuple[Record, str]:
    """Store `data` as an attachment named `filename` and deliver it to `recipient`."""
    _check_recipient(team, sender, recipient)
    name = str(recipient or "").strip()
    to_user = is_user_recipient(team, name)
    if len(data) > team.settings.max_attachment_bytes:
        raise TeamError(
            f"'{filename}' is {len(data)} bytes; attachments are limited to "
            f"{team.settings.max_attachment_bytes} ([server.team_tools] max_attachment_bytes)"
        )
    text = str(description) if isinstance(description, str) else ""
    limits.check_attachment_texts(team, filename, text)
    target = "user" if to_user else name
    record = new_attachment(data, filename, text, sender, [target], task_id)
    async with team.quota_lock:
        await limits.check_attachment_quota(team, len(data))
        team.book(len(data) + text_bytes(record))
        try:
            await team.store.put_attachment(team.key, record, data)
        except StoreUnavailableError as exc:
            raise TeamError(f"'{filename}' was not sent: {exc}") from exc
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
    parts = path_parts(root, path)
    # A file in the caller's folder, as write_file's: counted, and removed with its task.
    files = current_task_files.get()
    refused = files.refusal(len(data)) if files is not None else None
    if refused is not None:
        raise TeamError(f"not saved: {refused}")
    parts, stat = _write_target(root, parts, record["filename"], data)
    if files is not None:
        files.file_written(str(root.joinpath(*parts)), stat)
    return "/".join(parts)
