"""File access inside a root folder without a check-then-use gap.

Every path component is opened relative to the previous one (``dir_fd``) with ``O_NOFOLLOW``,
so a link swapped in between a check and the use is refused by the kernel; a path that
climbs above the root is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

# Walking relative to directory descriptors has no PATH_MAX: without these bounds one call
# could create a tree thousands of folders deep (20,000 levels took 2 s) that recursive tools
# (os.walk, shutil.rmtree) cannot even traverse.
MAX_PATH_CHARS = 4096
MAX_PATH_DEPTH = 64

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafePath(Exception):
    """A path that cannot be used safely; the text names it and says why."""


class OutsideRoot(UnsafePath):
    pass


class LinkRefused(UnsafePath):
    pass


def entry_parts(root: Path, raw: str) -> list[str]:
    """The components of `raw` below `root` (empty for the root itself).

    `raw` is relative to the root, or absolute and inside it. Raises OutsideRoot otherwise.
    """
    if "\x00" in raw:
        raise UnsafePath(f"{raw!r} is not a valid path")
    if len(raw) > MAX_PATH_CHARS:
        raise UnsafePath(f"the path is {len(raw)} characters long; the limit is {MAX_PATH_CHARS}")
    path = Path(os.path.expanduser(raw))
    if path.is_absolute():
        normal = Path(os.path.normpath(path))
        try:
            path = normal.relative_to(root)
        except ValueError:
            raise OutsideRoot(f"{raw} is outside the file root") from None
    normal_text = os.path.normpath(path) if str(path) else "."
    parts = [p for p in Path(normal_text).parts if p not in ("", ".")]
    if parts and parts[0] == "..":
        raise OutsideRoot(f"{raw} is outside the file root")
    if len(parts) > MAX_PATH_DEPTH:
        raise UnsafePath(
            f"{raw[:80]}... is {len(parts)} folders deep; the limit is {MAX_PATH_DEPTH}"
        )
    return parts


def _refusal(parent_fd: int, name: str, shown: str, exc: OSError) -> OSError | UnsafePath:
    """Turn an open failure into a clear error (a link is named as such)."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            if stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode):
                return LinkRefused(
                    f"{shown} is (or goes through) a symbolic link; links are not followed"
                )
        except OSError:
            pass
    return exc


@contextmanager
def parent_dir(root: Path, parts: list[str], *, create: bool = False) -> Iterator[int]:
    """A descriptor of the folder that holds ``parts[-1]`` (the root itself for one part).

    With `create`, missing folders on the way are made (never through a link).
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts[:-1]):
            shown = "/".join(parts[: index + 1])
            try:
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                try:
                    next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _refusal(fd, part, shown, exc) from None
            except OSError as exc:
                raise _refusal(fd, part, shown, exc) from None
            os.close(fd)
            fd = next_fd
        yield fd
    finally:
        os.close(fd)


@contextmanager
def open_dir(root: Path, parts: list[str]) -> Iterator[int]:
    """A descriptor of the folder `parts` names (the root for no parts); links refused."""
    if not parts:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        with parent_dir(root, parts) as parent:
            try:
                fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
            except OSError as exc:
                raise _refusal(parent, parts[-1], "/".join(parts), exc) from None
    try:
        yield fd
    finally:
        os.close(fd)


def lstat_entry(parent_fd: int, name: str) -> os.stat_result | None:
    """The entry's own status (a link is not followed), or None when it does not exist."""
    try:
        return os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_file(parent_fd: int, name: str, flags: int, shown: str, mode: int = 0o644) -> int:
    """Open `name` in `parent_fd` without following a link; only regular files are kept."""
    try:
        fd = os.open(name, flags | _FILE_FLAGS, mode, dir_fd=parent_fd)
    except OSError as exc:
        raise _refusal(parent_fd, name, shown, exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePath(f"{shown} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def read_regular(parent_fd: int, name: str, shown: str, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of a regular file (the caller checks the cap)."""
    fd = open_file(parent_fd, name, os.O_RDONLY, shown)
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit + 1)


def write_regular(parent_fd: int, name: str, shown: str, data: bytes) -> os.stat_result:
    """Create or replace the contents of a regular file (never through a link); its stat
    once written."""
    fd = open_file(parent_fd, name, os.O_WRONLY | os.O_CREAT, shown)
    with os.fdopen(fd, "wb") as fh:
        fh.truncate(0)
        fh.write(data)
        fh.flush()
        return os.fstat(fh.fileno())


def is_link(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISLNK(st.st_mode)


def is_dir(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISDIR(st.st_mode)


def is_regular(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISREG(st.st_mode)
