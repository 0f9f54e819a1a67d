"""Which caller's instance an action runs for (a context variable the runtime sets)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# (caller_role, caller_id) of the instance whose action is running; None outside any action.
current_instance: ContextVar[tuple[str, str] | None] = ContextVar(
    "mail_current_instance", default=None
)

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# The shape of a hashed folder name: a plain id of this shape is hashed as well, or the caller
# whose id is `h<hex>` would share the folder of the one whose odd id hashes to `<hex>`.
_HASHED = re.compile(r"[^-]+-h[0-9a-f]{24}", re.IGNORECASE)


@contextmanager
def acting_for(role: str, caller_id: str) -> Iterator[None]:
    token = current_instance.set((role, caller_id))
    try:
        yield
    finally:
        current_instance.reset(token)


def instance_folder_name(role: str, caller_id: str) -> str:
    """A folder name for one instance: ``<role>-<id>``; ids that are not plain are hashed.

    Ids from an external auth service may hold ``/``, ``..`` or anything else, so only
    letters, digits, ``.``, ``_`` and ``-`` are used as they are (and not when they look like a
    hashed name, so no id can name another id's folder).
    """
    name = f"{role}-{caller_id}"
    if _PLAIN.fullmatch(name) and ".." not in name and not _HASHED.fullmatch(name):
        return name
    digest = hashlib.sha256(f"{role}\x00{caller_id}".encode()).hexdigest()[:24]
    safe_role = role if _PLAIN.fullmatch(role) else "caller"
    return f"{safe_role}-h{digest}"
