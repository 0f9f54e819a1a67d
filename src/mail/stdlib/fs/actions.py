"""File actions: read_file, write_file, delete_file, create_directory, read_directory.

Every path is confined to the ``[stdlib.fs] root`` folder (see :mod:`mail.stdlib.fs.sandbox`);
reads and writes are capped by ``max_read_bytes`` / ``max_write_bytes``. Text is UTF-8.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mail.stdlib._common import error, exception_text, settings, stdlib_action
from mail.stdlib.fs.sandbox import PathRefused, confine, confine_entry, file_root

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


def _path_arg(args: dict[str, Any]) -> str | None:
    value = args.get("path")
    return value if isinstance(value, str) else None


async def _in_root(raw: str, work: Callable[[Path], str], *, keep_link: bool = False) -> str:
    """Resolve ``raw`` inside the root and run ``work`` on it in a worker thread."""
    cfg = settings()

    def run() -> str:
        root = file_root(cfg)
        target = confine_entry(root, raw) if keep_link else confine(root, raw)
        return work(target)

    try:
        return await asyncio.to_thread(run)
    except PathRefused as exc:
        return error(str(exc))
    except UnicodeDecodeError:
        return error(f"{raw} is not a UTF-8 text file")
    except OSError as exc:
        return error(exc.strerror or str(exc))
    except Exception as exc:  # noqa: BLE001 - every failure becomes the agent's Error: text
        return exception_text(exc)


@stdlib_action("read_file", "Read a text file and return its contents.", PATH_ONLY)
async def read_file(args: dict[str, Any]) -> str:
    raw = _path_arg(args)
    if raw is None:
        return error("`path` must be a string")
    limit = settings().fs.max_read_bytes

    def work(target: Path) -> str:
        if not target.exists():
            return error(f"file not found at {raw}")
        if not target.is_file():
            return error(f"{raw} is not a file")
        size = target.stat().st_size
        if size > limit:
            return error(
                f"{raw} is {size} bytes, over the read limit of {limit} bytes "
                "([stdlib.fs] max_read_bytes)"
            )
        with target.open("rb") as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            return error(f"{raw} is over the read limit of {limit} bytes")
        return data.decode("utf-8")

    return await _in_root(raw, work)


@stdlib_action(
    "write_file", "Create or overwrite a text file with the given content.", WRITE_SCHEMA
)
async def write_file(args: dict[str, Any]) -> str:
    raw = _path_arg(args)
    if raw is None:
        return error("`path` must be a string")
    content = args.get("content")
    if not isinstance(content, str):
        return error("`content` must be a string")
    data = content.encode("utf-8")
    limit = settings().fs.max_write_bytes
    if len(data) > limit:
        return error(
            f"content is {len(data)} bytes, over the write limit of {limit} bytes "
            "([stdlib.fs] max_write_bytes)"
        )

    def work(target: Path) -> str:
        if target.exists():
            if not target.is_file():
                return error(f"{raw} is not a file")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return f"successfully wrote to {raw}"

    return await _in_root(raw, work)


@stdlib_action("delete_file", "Delete one file (never a directory).", PATH_ONLY)
async def delete_file(args: dict[str, Any]) -> str:
    raw = _path_arg(args)
    if raw is None:
        return error("`path` must be a string")

    def work(target: Path) -> str:
        if target.is_symlink():
            target.unlink()
            return f"successfully deleted {raw}"
        if not target.exists():
            return error(f"file not found at {raw}")
        if not target.is_file():
            return error(f"{raw} is not a file")
        target.unlink()
        return f"successfully deleted {raw}"

    return await _in_root(raw, work, keep_link=True)


@stdlib_action("create_directory", "Create a directory, including missing parents.", PATH_ONLY)
async def create_directory(args: dict[str, Any]) -> str:
    raw = _path_arg(args)
    if raw is None:
        # The original indexed args["path"] and raised KeyError when it was missing.
        return error("`path` must be a string")

    def work(target: Path) -> str:
        if target.is_dir():
            return error(f"directory already exists at {raw}")
        if target.exists():
            return error(f"{raw} is a file, not a directory")
        target.mkdir(parents=True)
        return f"successfully created directory at {raw}"

    return await _in_root(raw, work)


@stdlib_action("read_directory", "List the names of the entries in a directory.", PATH_ONLY)
async def read_directory(args: dict[str, Any]) -> str:
    raw = _path_arg(args)
    if raw is None:
        return error("`path` must be a string")

    def work(target: Path) -> str:
        if not target.exists():
            return error(f"directory not found at {raw}")
        if not target.is_dir():
            return error(f"{raw} is not a directory")
        return "\n".join(sorted(entry.name for entry in target.iterdir()))

    return await _in_root(raw, work)


__all__ = ["create_directory", "delete_file", "read_directory", "read_file", "write_file"]
