"""What a server does once before it first listens: the registry folder, the local API keys
(printed once) and the SQLite database (its schema, and a lock against a second server).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from mail.server.auth import AuthConfigError, resolve_auth_mode
from mail.server.keystore import KeyStoreError, bootstrap_keys
from mail.server.state import StartupError


def print_bootstrap(created: list[Any], path: Path, base_url: str) -> None:
    """Show the keys made on a first start (the only time their secrets are shown)."""
    user_key = next(secret for secret, record in created if record.role == "user")
    lines = [
        f"No API keys were found, so two were created in {path} (shown only this once):",
        *[f"  {record.role:<5} key (id '{record.id}'): {secret}" for secret, record in created],
        "Use them as bearer tokens, for example:",
        f"  export TOKEN={user_key}",
        f'  curl -H "Authorization: Bearer $TOKEN" {base_url}/whoami',
        "Manage keys with `mail keys create|list|revoke`.",
    ]
    print("\n".join(lines), flush=True)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


STORE_PATH_HINT = "or set [server.store] path in mail.toml to a writable place"


def _reason(exc: BaseException, path: Path) -> str:
    """Why SQLite or the file system refused, in words (not an errno dump)."""
    errno_ = getattr(exc, "errno", None)
    text = first_line(exc)
    if errno_ == 28 or "disk is full" in text or (text == "disk I/O error" and _full(path)):
        # (ENOSPC, SQLITE_FULL; SQLite names no space for its -shm file an I/O error)
        return "the disk is full (no space left on device); free space there"
    if errno_ == 30 or (errno_ is None and "read-only file system" in text.lower()):
        return "its folder is on a read-only file system; make it writable"
    if errno_ == 13 or "readonly database" in text or "unable to open" in text:
        return f"it cannot be written ({text}); check the folder's and the file's permissions"
    return text if errno_ is None else (getattr(exc, "strerror", None) or text)


def _full(path: Path) -> bool:
    try:
        return os.statvfs(path.parent).f_bavail == 0
    except OSError:
        return False


def _sidecar_problem(path: Path) -> str | None:
    """A -wal or -shm file beside the database that SQLite cannot use (left by another user,
    made read-only, or not a file at all): SQLite itself only says the database is
    read-only or cannot be opened."""
    for suffix in ("-wal", "-shm"):
        sidecar = path.with_name(path.name + suffix)
        try:
            info = sidecar.lstat()
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            why = "is not a regular file"
        elif info.st_uid != os.geteuid() and not os.access(sidecar, os.R_OK | os.W_OK):
            why = f"belongs to another user (uid {info.st_uid}) and cannot be written"
        elif not os.access(sidecar, os.R_OK | os.W_OK):
            why = "cannot be written"
        else:
            continue
        keep = (
            "; do not delete a -wal file: it can hold committed writes" if suffix == "-wal" else ""
        )
        return (
            f"{sidecar} {why}; give it to the user the server runs as (uid {os.geteuid()}) "
            f"or stop the program that made it{keep}"
        )
    return None


def unusable_database(path: Path, exc: BaseException) -> str:
    """One line for a database the server cannot use: which file, why, what to change."""
    reason = _sidecar_problem(path) or _reason(exc, path)
    return f"cannot use the SQLite database {path}: {reason}; {STORE_PATH_HINT}"


def prepare_sqlite(cfg: Any) -> None:
    """Create the SQLite file, or check it and bring its schema up to date; the first start
    says where. A file damaged inside is refused here, in one line, like any unusable file.

    Nothing happens when the server keeps its tasks in memory or in PostgreSQL.
    """
    from mail.store import database_url_from_env, store_kind
    from mail.store.sqlite_schema import (
        DatabaseInUseError,
        ProcessLock,
        connect,
        is_empty_file,
        migrate,
        quick_check,
    )

    if store_kind(cfg.store.kind, database_url_from_env()) != "sqlite":
        return
    path = cfg.store.database_path(cfg.swarm.registry_file)
    first = not path.exists()
    emptied = is_empty_file(path)
    seconds = cfg.store.integrity_check_seconds
    try:
        with ProcessLock(path):  # a second server on the same file stops here
            conn = connect(path)
            try:
                check = quick_check(conn, 0 if first or emptied else seconds)
                if check.problem is not None:
                    raise StartupError(
                        f"cannot use the SQLite database {path}: it is damaged (PRAGMA "
                        f"quick_check: {check.problem}); restore it from a backup, or move it "
                        "away to start with an empty one"
                    )
                migrate(conn)
            finally:
                conn.close()
    except StartupError:
        raise
    except DatabaseInUseError as exc:
        raise StartupError(str(exc)) from None
    except Exception as exc:
        raise StartupError(unusable_database(path, exc)) from None
    if emptied:
        print(
            f"MAIL data: {path.resolve()} was an empty file (0 bytes); it is a new, empty "
            "database now (if it held data, stop the server and restore it from a backup)",
            flush=True,
        )
    elif not first and seconds > 0 and not check.finished:
        size = path.stat().st_size / 2**20
        print(
            f"MAIL data: {path.resolve()}: the integrity check of this {size:.0f} MiB file "
            f"stopped after {seconds:g} s, the rest is not checked "
            "([server.store] integrity_check_seconds)",
            flush=True,
        )
    if first:
        print(
            f"MAIL data: {path.resolve()} (SQLite; kept across restarts; "
            "[server.store] in mail.toml or DATABASE_URL to change)",
            flush=True,
        )


def prepare_first_start(cfg: Any) -> None:
    """The registry folder, the local keys (when auth is local) and the SQLite database."""
    try:
        mode = resolve_auth_mode(cfg)
    except AuthConfigError as exc:
        raise StartupError(str(exc)) from None
    folder = Path(cfg.swarm.registry_file).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create {folder}: {exc.strerror or exc}") from None
    prepare_sqlite(cfg)  # before the keys: a start refused here prints no keys
    try:
        if mode == "local":
            keys_path = cfg.keys_file_path()
            created = bootstrap_keys(keys_path)
            if created:
                print_bootstrap(created, keys_path, cfg.base_url)
    except KeyStoreError as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        raise StartupError(f"cannot create {folder}: {exc.strerror or exc}") from None
