"""The local key file used by the embedded auth mode."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import os
import re
import secrets
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger("mail.auth")

ROLES: tuple[str, ...] = ("admin", "user", "agent")
KEY_PREFIX = "mail_"
SHOWN_CHARS = 7  # of a key's secret shown by `mail keys list`: 42 of a generated key's 256 bits
MIN_CUSTOM_KEY_LENGTH = 24
MIN_CUSTOM_KEY_DISTINCT = 6  # different characters: "xxxx…" or "1234" repeated is no secret
FILE_VERSION = 1
# Ids and swarm names end up in `role:id@swarm` task contributors: no `@`, `:`, whitespace.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class KeyStoreError(ValueError):
    """A key file that cannot be read/written, or a bad key operation."""


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    role: str
    prefix: str
    sha256: str
    created_at: str
    swarm: str | None = None

    def public_dict(self) -> dict[str, str]:
        """What `mail keys list` shows: everything but the digest."""
        return {name: value for name, value in self.file_dict().items() if name != "sha256"}

    def file_dict(self) -> dict[str, str]:
        data = {
            "id": self.id,
            "role": self.role,
            "prefix": self.prefix,
            "sha256": self.sha256,
            "created_at": self.created_at,
        }
        if self.swarm:
            data["swarm"] = self.swarm
        return data


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def shown_prefix(key: str) -> str:
    """What `mail keys list` shows of a key (and the file keeps): ``SHOWN_CHARS`` characters
    of its secret, after "mail_" when it starts so; a custom key shows no more of itself than
    a generated one does."""
    return key[: (len(KEY_PREFIX) if key.startswith(KEY_PREFIX) else 0) + SHOWN_CHARS]


def _parse_records(path: Path, raw: bytes) -> list[KeyRecord]:
    if not raw.strip():
        return []
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise KeyStoreError(f"key file {path} is not valid JSON: {exc}") from exc
    items = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise KeyStoreError(f"key file {path} must be an object with a 'keys' list")
    records: list[KeyRecord] = []
    for i, item in enumerate(items):
        try:
            record = KeyRecord(
                id=str(item["id"]),
                role=str(item["role"]),
                # (Files written before kept 12 characters, half of a 24-character custom key.)
                prefix=shown_prefix(str(item.get("prefix", ""))),
                sha256=str(item["sha256"]).lower(),
                created_at=str(item.get("created_at", "")),
                swarm=str(item["swarm"]) if item.get("swarm") else None,
            )
        except (KeyError, TypeError) as exc:
            raise KeyStoreError(f"key file {path}: entry {i} is missing {exc}") from exc
        if record.role not in ROLES:
            raise KeyStoreError(f"key file {path}: entry {i} has unknown role '{record.role}'")
        records.append(record)
    return records


def read_records(path: Path) -> list[KeyRecord]:
    """All records in ``path`` (an absent file has none)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise KeyStoreError(f"cannot read key file {path}: {exc.strerror or exc}") from exc
    return _parse_records(path, raw)


def write_records(path: Path, records: Iterable[KeyRecord]) -> None:
    """Atomically replace ``path`` with ``records``; the file is created with mode 0600."""
    payload = {
        "version": FILE_VERSION,
        "keys": [r.file_dict() for r in records],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".keys-", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp already creates the file 0600; chmod again in case of an unusual umask/platform.
        os.chmod(tmp, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def check_name(value: str, what: str) -> None:
    """Ids and swarm names: letters, digits, `.`, `_`, `-` (they end up in `role:id@swarm`)."""
    if not _NAME.match(value):
        raise KeyStoreError(
            f"invalid {what} '{value}': use 1-128 letters, digits, '.', '_' or '-' starting "
            "with a letter or digit (no spaces, '@' or ':', which would clash with "
            "'role:id@swarm' task owners)"
        )


def create_key(
    path: Path,
    role: str,
    key_id: str | None = None,
    *,
    key: str | None = None,
    swarm: str | None = None,
) -> tuple[str, KeyRecord]:
    """Add a key to ``path`` and return ``(secret, record)``. The secret is not stored.

    ``swarm`` binds an agent key to one remote swarm.
    """
    if role not in ROLES:
        raise KeyStoreError(f"role must be one of {', '.join(ROLES)}, got '{role}'")
    if key_id:
        check_name(key_id, "id")
    if swarm is not None:
        if role != "agent":
            raise KeyStoreError("only agent keys can be bound to a swarm (--swarm)")
        check_name(swarm, "swarm name")
    if key is None:
        key = generate_key()
    elif len(key) < MIN_CUSTOM_KEY_LENGTH or any(c.isspace() for c in key):
        raise KeyStoreError(
            f"a custom key must be at least {MIN_CUSTOM_KEY_LENGTH} characters with no whitespace"
        )
    elif (distinct := len(set(key.removeprefix(KEY_PREFIX)))) < MIN_CUSTOM_KEY_DISTINCT:
        raise KeyStoreError(
            f"a custom key must be random: this one has {distinct} different characters "
            f"(at least {MIN_CUSTOM_KEY_DISTINCT}); leave out --key to have one generated"
        )
    records = read_records(path)
    digest = hash_key(key)
    if any(r.sha256 == digest for r in records):
        raise KeyStoreError("that key is already in the key file")
    if not key_id:
        key_id = f"{role}-{secrets.token_hex(4)}"
    record = KeyRecord(
        id=key_id,
        role=role,
        prefix=shown_prefix(key),
        sha256=digest,
        created_at=datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        swarm=swarm,
    )
    records.append(record)
    write_records(path, records)
    return key, record


def revoke_keys(path: Path, id_or_prefix: str, *, role: str | None = None) -> list[KeyRecord]:
    """Remove the keys named by ``id_or_prefix`` (only those of ``role`` when given)."""
    if not id_or_prefix:
        raise KeyStoreError("an id or key prefix is required")
    if role is not None and role not in ROLES:
        raise KeyStoreError(f"role must be one of {', '.join(ROLES)}, got '{role}'")
    records = read_records(path)
    removed = [r for r in records if r.id == id_or_prefix and role in (None, r.role)]
    roles = sorted({r.role for r in removed})
    if len(roles) > 1:
        raise KeyStoreError(
            f"id '{id_or_prefix}' has keys of several roles ({', '.join(roles)}); "
            "say which with --role"
        )
    if not removed:
        digest = hash_key(id_or_prefix)
        removed = [r for r in records if r.sha256 == digest]
    # A shown prefix: at least 4 characters of the secret, agreeing with the record's prefix
    # ('mail' is no character of a generated key's secret).
    secret = "" if KEY_PREFIX.startswith(id_or_prefix) else id_or_prefix.removeprefix(KEY_PREFIX)
    if not removed and len(secret) >= 4:
        removed = [
            r for r in records if r.prefix and r.prefix.startswith(id_or_prefix[: len(r.prefix)])
        ]
        if len(removed) > 1:
            raise KeyStoreError(
                f"prefix '{id_or_prefix}' matches {len(removed)} keys; use a longer prefix or the id"
            )
    if removed:
        write_records(path, [r for r in records if r not in removed])
    return removed


class LocalKeyStore:
    """In-memory view of the key file for request-time lookups.

    A lookup is one ``stat`` (to notice edits by ``mail keys``) plus a dict lookup of the key's
    digest. The file is parsed again only when it changed. Keys that matched are remembered
    until then, so steady traffic skips hashing (only known keys are kept: at most one entry
    per record).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fspath = os.fspath(self.path)
        self._by_digest: dict[str, KeyRecord] = {}
        self._by_key: dict[str, KeyRecord] = {}
        self._signature: tuple[int, int, int] | None = None
        self._load_error: str | None = None
        self.refresh()

    def refresh(self) -> None:
        try:
            st = os.stat(self._fspath)
        except FileNotFoundError:
            if self._signature is not None or self._by_digest:
                logger.warning(
                    "key file %s disappeared; all local keys are now rejected", self.path
                )
            self._signature = None
            self._by_digest = {}
            self._by_key = {}
            return
        except OSError as exc:
            logger.error("cannot stat key file %s: %s", self.path, exc)
            return
        signature = (st.st_mtime_ns, st.st_size, st.st_ino)
        if signature == self._signature:
            return
        try:
            records = read_records(self.path)
        except KeyStoreError as exc:
            # Keep serving the last good set rather than locking everybody out on a bad edit.
            if self._load_error != str(exc):
                logger.error("%s (keeping the previously loaded keys)", exc)
            self._load_error = str(exc)
            self._signature = signature
            return
        self._load_error = None
        self._signature = signature
        self._by_digest = {r.sha256: r for r in records}
        self._by_key = {}
        if st.st_mode & 0o077:
            logger.warning("key file %s is readable by other users; run chmod 600 on it", self.path)
        logger.info("loaded %d local API key(s) from %s", len(self._by_digest), self.path)

    def lookup(self, api_key: str) -> KeyRecord | None:
        self.refresh()
        record = self._by_key.get(api_key)
        if record is None:
            record = self._by_digest.get(hash_key(api_key))
            if record is not None and len(self._by_key) < len(self._by_digest):
                self._by_key[api_key] = record
        return record

    def __len__(self) -> int:
        return len(self._by_digest)


def bootstrap_keys(path: Path) -> list[tuple[str, KeyRecord]]:
    """Create one admin and one user key when ``path`` has no keys yet; return what was made."""
    if read_records(path):
        return []
    return [create_key(path, "admin", "admin"), create_key(path, "user", "user")]


def records_as_json(records: Iterable[KeyRecord]) -> list[dict[str, Any]]:
    return [r.public_dict() for r in records]
