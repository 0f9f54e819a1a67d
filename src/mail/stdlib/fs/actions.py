"""File actions: read_file, write_file, delete_file, create_directory, read_directory."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mail.core.file_root import file_root
from mail.core.stored_bytes import current_task_files
from mail.stdlib._common import error, exception_text, settings, stdlib_action
from mail.utils.safe_files import (
    OutsideRoot,
    UnsafePath,
    entry_parts,
    is_dir,
    is_link,
    is_regular,
    lstat_entry,
    open_dir,
    parent_dir,
    read_regular,
    write_regular,
)


class PathRefused(Exception):
    """A path that leaves the file root (the message is shown to the agent)."""


def confine_parts(root: Path, raw: str) -> list[str]:
    """The components of `raw` below `root`, or PathRefused (the agent's error text)."""
    try:
        return entry_parts(root, raw)
    except OutsideRoot:
        raise PathRefused(f"{raw} is outside the file root ([stdlib.fs] root)") from None
    except UnsafePath as exc:
        raise PathRefused(str(exc)) from None


PATH_ONLY: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string", "description": "Path of the target."}},
    "required": ["path"],
}

WRITE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Path of the file to write."},
        "content": {"type": "string", "description": "Text to write (replaces the file)."},
    },
    # The original left this out, telling the model both fields were optional.
    "required": ["path", "content"],
}


class _Refusal(Exception):
    """Ends a file action with ``Error: <its text>``."""


def _path_arg(args: dict[str, Any]) -> str | None:
    value = args.get("path")
    return value if isinstance(value, str) else None


async def _in_root(
    args: dict[str, Any], work: Callable[[Path, list[str], str], str], allow_empty: bool = False
) -> str:
    """Split ``args["path"]`` below the caller's root and run ``work`` on it in a worker thread
    (an empty path, the root itself, only with `allow_empty`)."""
    raw = _path_arg(args)
    if raw is None:
        return error("`path` must be a string")
    if not raw and not allow_empty:
        return error("`path` is empty")
    cfg = settings()

    def run() -> str:
        root = file_root(cfg)
        return work(root, confine_parts(root, raw), raw)

    try:
        # to_thread copies the context, so the worker sees whose instance it serves.
        return await asyncio.to_thread(run)
    except (PathRefused, UnsafePath, _Refusal) as exc:
        return error(str(exc))
    except UnicodeDecodeError:
        return error(f"{raw} is not a UTF-8 text file")
    except OSError as exc:
        return error(exc.strerror or str(exc))
    except Exception as exc:  # noqa: BLE001 - every failure becomes the agent's Error: text
        return exception_text(exc)


@contextmanager
def _last_entry(
    root: Path, parts: list[str], *, empty: str, missing: str | None = None, create: bool = False
) -> Iterator[tuple[int, os.stat_result | None]]:
    """The folder that holds ``parts[-1]`` and that entry's lstat (None when absent).

    No parts (the root itself) refuses with ``empty``; with ``missing``, an absent entry or
    folder on the way (also one that vanishes during the block) refuses with that text.
    """
    if not parts:
        raise _Refusal(empty)
    try:
        with parent_dir(root, parts, create=create) as folder:
            entry = lstat_entry(folder, parts[-1])
            if entry is None and missing is not None:
                raise _Refusal(missing)
            yield folder, entry
    except FileNotFoundError:
        if missing is None:
            raise
        raise _Refusal(missing) from None


@stdlib_action("read_file", "Read a text file and return its contents.", PATH_ONLY)
async def read_file(args: dict[str, Any]) -> str:
    limit = settings().fs.max_read_bytes

    def work(root: Path, parts: list[str], raw: str) -> str:
        found = _last_entry(
            root, parts, empty=f"{raw} is not a file", missing=f"file not found at {raw}"
        )
        with found as (folder, entry):
            assert entry is not None
            if not is_link(entry) and not is_regular(entry):
                return error(f"{raw} is not a file")
            if entry.st_size > limit and is_regular(entry):
                return error(
                    f"{raw} is {entry.st_size} bytes, over the read limit of {limit} bytes "
                    "([stdlib.fs] max_read_bytes)"
                )
            data = read_regular(folder, parts[-1], raw, limit)
        if len(data) > limit:
            return error(f"{raw} is over the read limit of {limit} bytes")
        return data.decode("utf-8")

    return await _in_root(args, work)


@stdlib_action(
    "write_file", "Create or overwrite a text file with the given content.", WRITE_SCHEMA
)
async def write_file(args: dict[str, Any]) -> str:
    if _path_arg(args) is None:
        return error("`path` must be a string")  # reported before a bad `content`
    content = args.get("content")
    if not isinstance(content, str):
        return error("`content` must be a string")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        return error("`content` cannot be written as UTF-8: it holds an unpaired surrogate")
    limit = settings().fs.max_write_bytes
    if len(data) > limit:
        return error(
            f"content is {len(data)} bytes, over the write limit of {limit} bytes "
            "([stdlib.fs] max_write_bytes)"
        )
    # The caller's stored bytes count the file, and it is removed with its task.
    files = current_task_files.get()
    refused = files.refusal(len(data)) if files is not None else None
    if refused is not None:
        return error(f"not written: {refused}")
    written: list[tuple[str, os.stat_result]] = []

    def work(root: Path, parts: list[str], raw: str) -> str:
        with _last_entry(root, parts, empty=f"{raw} is not a file", create=True) as found:
            folder, entry = found
            if entry is not None and not is_link(entry) and not is_regular(entry):
                return error(f"{raw} is not a file")
            stat = write_regular(folder, parts[-1], raw, data)
        written.append((str(root.joinpath(*parts)), stat))
        return f"successfully wrote to {raw}"

    result = await _in_root(args, work)
    if files is not None:
        for path, stat in written:
            files.file_written(path, stat)
    return result


@stdlib_action("delete_file", "Delete one file (never a directory).", PATH_ONLY)
async def delete_file(args: dict[str, Any]) -> str:
    def work(root: Path, parts: list[str], raw: str) -> str:
        found = _last_entry(
            root, parts, empty=f"{raw} is not a file", missing=f"file not found at {raw}"
        )
        with found as (folder, entry):
            if is_dir(entry):
                return error(f"{raw} is not a file")
            # unlink removes a link itself, never what it points to.
            os.unlink(parts[-1], dir_fd=folder)
        return f"successfully deleted {raw}"

    return await _in_root(args, work)


@stdlib_action("create_directory", "Create a directory, including missing parents.", PATH_ONLY)
async def create_directory(args: dict[str, Any]) -> str:
    # The original indexed args["path"] and raised KeyError when it was missing.
    def work(root: Path, parts: list[str], raw: str) -> str:
        exists = f"directory already exists at {raw}"
        with _last_entry(root, parts, empty=exists, create=True) as (folder, entry):
            if is_dir(entry):
                return error(exists)
            if is_link(entry):
                return error(f"{raw} is a symbolic link; links are not followed")
            if entry is not None:
                return error(f"{raw} is a file, not a directory")
            os.mkdir(parts[-1], 0o777, dir_fd=folder)
        return f"successfully created directory at {raw}"

    return await _in_root(args, work)


@stdlib_action("read_directory", "List the names of the entries in a directory.", PATH_ONLY)
async def read_directory(args: dict[str, Any]) -> str:
    def work(root: Path, parts: list[str], raw: str) -> str:
        try:
            if parts:
                with parent_dir(root, parts) as folder:
                    entry = lstat_entry(folder, parts[-1])
                    if entry is None:
                        return error(f"directory not found at {raw}")
                    if not is_dir(entry) and not is_link(entry):
                        return error(f"{raw} is not a directory")
            with open_dir(root, parts) as fd:
                return "\n".join(sorted(os.listdir(fd)))
        except FileNotFoundError:
            return error(f"directory not found at {raw}")
        except NotADirectoryError:
            return error(f"{raw} is not a directory")

    # An empty path lists the caller's folder, as "." does.
    return await _in_root(args, work, allow_empty=True)


__all__ = ["create_directory", "delete_file", "read_directory", "read_file", "write_file"]
