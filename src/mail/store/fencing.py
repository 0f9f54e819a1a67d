"""Bookkeeping of instance generations (fencing) held by one store object."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

logger = logging.getLogger("mail.store.fencing")


class _InstanceKeyLike(Hashable, Protocol):
    """What fencing needs of a key: ``store.base.InstanceKey`` (typed structurally, so this
    module stays below base.py, which builds on it)."""

    @property
    def swarm_name(self) -> str: ...

    @property
    def caller_role(self) -> str: ...

    @property
    def caller_id(self) -> str: ...


InstanceKey = TypeVar("InstanceKey", bound=_InstanceKeyLike)


class FenceState(Generic[InstanceKey]):
    """Generations one store object claimed, and the keys it lost."""

    __slots__ = ("leases", "fenced", "fenced_writes", "on_fenced")

    def __init__(self) -> None:
        # key -> generation this store claimed (absent: the key is not fenced at all).
        self.leases: dict[InstanceKey, int] = {}
        # keys whose generation was claimed by someone else after ours.
        self.fenced: set[InstanceKey] = set()
        self.fenced_writes = 0
        self.on_fenced: Callable[[InstanceKey], object] | None = None

    def generation_for(self, key: InstanceKey) -> int | None:
        """The generation a write for `key` carries; None for keys never claimed (hot path)."""
        leases = self.leases
        return leases.get(key) if leases else None

    def claimed(self, key: InstanceKey, generation: int) -> None:
        self.leases[key] = generation
        self.fenced.discard(key)

    def is_fenced(self, key: InstanceKey) -> bool:
        return key in self.fenced

    def drop_if_known_fenced(self, key: InstanceKey, generation: int | None) -> bool:
        """Count and drop a new write for a key already known to be lost (no round trip)."""
        if generation is not None and key in self.fenced and self.leases.get(key) == generation:
            self.fenced_writes += 1
            return True
        return False

    def dropped(self, key: InstanceKey, generation: int, count: int, current: int | None) -> None:
        """`count` writes for `key` made under `generation` were dropped: `current` holds."""
        self.fenced_writes += count
        if self.leases.get(key) != generation:
            # Our own later claim superseded these writes; we still own the key.
            return
        if key in self.fenced:
            return
        self.fenced.add(key)
        logger.warning(
            "instance %s/%s/%s lost its lease: this store holds generation %d but the"
            " current one is %s; its writes are dropped from now on",
            key.swarm_name,
            key.caller_role,
            key.caller_id,
            generation,
            "unclaimed" if current is None else current,
        )
        callback = self.on_fenced
        if callback is not None:
            try:
                callback(key)
            except Exception:
                logger.exception("on_fenced callback failed for %s", key)
