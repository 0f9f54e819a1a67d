"""Per-agent inboxes: what was delivered to an agent of a task and awaits its next turn."""

from __future__ import annotations

import itertools
from typing import Any

from mail.core.mailbox import message_priority
from mail.core.message import MAILMessage

MAX_STEPS_SUBJECT = "::maximum_steps_reached::"

_Item = tuple[int, int, MAILMessage]


class AgentInboxes:
    """Delivered-but-not-yet-shown messages, keyed ``"{task_id}::{agent}"``."""

    def __init__(self, batch: bool = True) -> None:
        self.batch = batch
        self._items: dict[str, list[_Item]] = {}
        # Keys with a turn started (or queued for the agent's lock) that has not yet taken
        # its messages: a new delivery joins that turn instead of starting another.
        self._turn_pending: set[str] = set()
        self._seq = itertools.count()
        # key -> the seqs the agent's next turn takes (`fence`); the others wait for the turn
        # after it.
        self._fences: dict[str, set[int]] = {}
        # A TaskJournal (mail.core.runtime_durable) while a store is attached, else None.
        self.journal: Any = None

    def add(self, key: str, message: MAILMessage) -> bool:
        """Hold ``message`` for the agent's next turn; True when a turn must be started."""
        priority, seq = message_priority(message), next(self._seq)
        self._items.setdefault(key, []).append((priority, seq, message))
        if self.journal is not None:
            self.journal.delivered(key, seq, priority, message)
        if not self.batch:
            return True
        if key in self._turn_pending:
            return False
        self._turn_pending.add(key)
        return True

    def take(self, key: str) -> list[MAILMessage]:
        """The messages of the turn that starts now (empty if another turn took them)."""
        items = self._items.get(key)
        if not self.batch:
            if not items:
                return []
            item = items.pop(0)
            if not items:
                del self._items[key]
            if self.journal is not None:
                self.journal.taken(key, [item[1]])
            return [item[2]]
        self._turn_pending.discard(key)
        if not items:
            return []
        fence = self._fences.pop(key, None)
        taken = [i for i in items if i[1] in fence] if fence else items
        if 0 < len(taken) < len(items):
            self._items[key] = [i for i in items if i not in taken]
            self._turn_pending.add(key)  # the rest: the turn the caller starts (`left`)
            items = taken
        else:
            del self._items[key]
        if len(items) == 1:  # the common case: nothing to order, no notices to fold
            if self.journal is not None:
                self.journal.taken(key, [items[0][1]])
            return [items[0][2]]
        items.sort(key=_order)
        if self.journal is not None:
            self.journal.taken(key, [item[1] for item in items])
        return _one_step_notice([item[2] for item in items])

    def fence(self, key: str) -> None:
        """The agent's next turn takes only what waits for it now (a turn re-run after a
        restart takes what it took before: mail.core.runtime_durable); what comes later is
        `left` for a turn of its own."""
        items = self._items.get(key)
        if self.batch and items:
            self._fences[key] = {item[1] for item in items}

    def left(self, key: str) -> bool:
        """Whether a turn's `take` left messages behind a fence (the caller starts a turn)."""
        return self.batch and key in self._items

    def drop_task(self, task_id: str) -> int:
        """Forget what waits for the agents of one task (its work was rolled back); returns
        how many messages that was."""
        prefix = task_id + "::"
        self._unfence(prefix)
        dropped = 0
        for key in [k for k in self._items if k.startswith(prefix)]:
            dropped += len(self._items.pop(key))
        self._turn_pending.difference_update(
            [k for k in self._turn_pending if k.startswith(prefix)]
        )
        return dropped

    def restart_keys(self, prefix: str) -> list[str]:
        """The turns of a task (keys starting with `prefix`) were cancelled: the agents whose
        messages still wait here, once per turn to start for them (counted as started)."""
        self._unfence(prefix)
        self._turn_pending.difference_update(
            [k for k in self._turn_pending if k.startswith(prefix)]
        )
        agents: list[str] = []
        for key, items in self._items.items():
            if items and key.startswith(prefix):
                agent = key[len(prefix) :]
                if self.batch:
                    self._turn_pending.add(key)
                    agents.append(agent)
                else:
                    agents.extend(agent for _ in items)
        return agents

    def _unfence(self, prefix: str) -> None:
        for key in [k for k in self._fences if k.startswith(prefix)]:
            del self._fences[key]

    def waiting(self, key: str) -> int:
        """How many messages wait for the agent's next turn."""
        return len(self._items.get(key, ()))

    def __len__(self) -> int:
        return sum(len(items) for items in self._items.values())


def _order(item: _Item) -> tuple[int, int]:
    return item[0], item[1]


def _one_step_notice(messages: list[MAILMessage]) -> list[MAILMessage]:
    """Keep only the newest step-limit notice of a batch.

    Every message over the limit is replaced by the same demand to call task_complete, each
    with a copy of the task's transcript; one of them says it all.
    """
    notices = [m for m in messages if _subject(m) == MAX_STEPS_SUBJECT]
    if len(notices) <= 1:
        return messages
    keep = notices[-1]
    return [m for m in messages if _subject(m) != MAX_STEPS_SUBJECT or m is keep]


def _subject(message: MAILMessage) -> Any:
    return message["message"]["subject"]
