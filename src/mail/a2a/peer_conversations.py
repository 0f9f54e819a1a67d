"""Outbound A2A conversations, one per (peer, caller, MAIL task).

Each caller has their own MAIL instance, so two callers can hold tasks with the same id (an
A2A ``contextId`` such as ``"chat"`` maps to the same MAIL task id for everyone). What we send
an A2A peer must therefore name the caller too, or one caller would continue another's
conversation with the peer and read its answers. The task's owner (``role:id@swarm``, from
the envelope) is the caller:

* the ``contextId`` sent to a peer is an HMAC of (peer, owner, MAIL task id) under a key drawn
  when the server starts, shaped as a UUID: the same for every message of one caller's task to
  one peer while the server runs, different for another caller, another task or another peer,
  and telling the peer nothing about who the caller is or what the task id is (not even to
  confirm a guess). After a restart a continued MAIL task starts a new context with the peer
  (the task waiting for input there is forgotten at a restart anyway);
* the peer's task waiting for input (``input-required``), which the sender's next message
  answers, is kept per (peer, owner, MAIL task id), at most ``MAX_WAITING`` of them (the
  oldest forgotten first: its next message then starts a new peer task).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections import OrderedDict

MAX_WAITING = 10_000

Key = tuple[str, str, str]  # (peer, task owner, MAIL task id)


class PeerConversations:
    def __init__(self, max_waiting: int = MAX_WAITING) -> None:
        self._secret = secrets.token_bytes(32)
        self._max_waiting = max_waiting
        self._waiting: OrderedDict[Key, str] = OrderedDict()

    def context_id(self, peer: str, owner: str, task_id: str) -> str:
        """The ``contextId`` of this caller's task in its conversation with ``peer``."""
        text = "\0".join((peer, owner, task_id)).encode("utf-8")
        digest = hmac.new(self._secret, text, hashlib.sha256).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def take_waiting(self, peer: str, owner: str, task_id: str) -> str:
        """The peer's task waiting for this caller's task to answer ('' when none); the next
        message answers it, so it is no longer waiting."""
        return self._waiting.pop((peer, owner, task_id), "")

    def wait(self, peer: str, owner: str, task_id: str, peer_task_id: str) -> None:
        """The peer's task ``peer_task_id`` asks this caller's task for input."""
        key = (peer, owner, task_id)
        self._waiting.pop(key, None)
        self._waiting[key] = peer_task_id
        while len(self._waiting) > self._max_waiting:
            self._waiting.popitem(last=False)
