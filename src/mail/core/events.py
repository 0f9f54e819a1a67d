"""Task event records: what the server streams as SSE and stores per task.

Events are created on the hot path, so the JSON text is produced lazily, once, the first
time someone reads it (a stream, GET /task, the store) and then shared by every reader.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from mail.core.message import build_mail_xml, utc_iso, utc_now_iso

Description = str | Callable[[], str]
# Marks a stored description whose message XML was left out (see TaskEvent.store_data).
_XML_FLAG = "description_xml"


class MessageText:
    """A description that is ``prefix`` followed by the XML rendering of ``message``.

    Rendered on first read like any lazy description; the store keeps only the prefix (the
    message is in ``extra_data.full_message``), so storing the event renders no XML at all.
    """

    __slots__ = ("prefix", "message")

    def __init__(self, prefix: str, message: Any) -> None:
        self.prefix = prefix
        self.message = message

    def __call__(self) -> str:
        return self.prefix + build_mail_xml(self.message)["content"]


_orjson: Any
try:  # not a declared dependency: used when the environment has it (it usually does)
    import orjson as _orjson

    # Datetimes, dataclasses and subclasses go to ``default`` as with the stdlib, so both
    # give the same text.
    _ORJSON_OPTIONS = (
        _orjson.OPT_PASSTHROUGH_DATETIME
        | _orjson.OPT_PASSTHROUGH_DATACLASS
        | _orjson.OPT_PASSTHROUGH_SUBCLASS
    )
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


def compact_json(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is; anything else JSON lacks as its ``str()``."""
    if _orjson is not None:
        try:
            return _orjson.dumps(value, default=str, option=_ORJSON_OPTIONS).decode()  # type: ignore[no-any-return]
        except TypeError:
            pass  # what orjson refuses (non-str keys, huge ints, NaN-free rules): the stdlib
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


class TaskEvent:
    """One event of a task: a name, a sequence id and a JSON payload."""

    __slots__ = (
        "event",
        "id",
        "task_id",
        "_timestamp",
        "_created",
        "_description",
        "_message_text",
        "extra_data",
        "_data",
        "_raw",
    )

    retry: int | None = None
    comment: str | None = None

    def __init__(
        self,
        event: str,
        task_id: str,
        description: Description,
        extra_data: dict[str, Any] | None = None,
        *,
        event_id: str | None = None,
        timestamp: str | None = None,
        raw_payload: dict[str, Any] | None = None,
    ) -> None:
        self.event = event
        self.task_id = task_id
        self.id = event_id
        self._timestamp = timestamp
        self._created = time.time_ns()
        self._description = description
        self._message_text = description if type(description) is MessageText else None
        self.extra_data = extra_data or {}
        self._data: str | None = None
        self._raw = raw_payload

    @property
    def timestamp(self) -> str:
        if self._timestamp is None:
            self._timestamp = utc_iso(self._created)
        return self._timestamp

    @property
    def description(self) -> str:
        if callable(self._description):
            self._description = self._description()
        return self._description

    @property
    def payload(self) -> dict[str, Any]:
        if self._raw is not None:
            return self._raw
        return {
            "timestamp": self.timestamp,
            "description": self.description,
            "task_id": self.task_id,
            "extra_data": self.extra_data,
        }

    @property
    def data(self) -> str:
        if self._data is None:
            self._data = compact_json(self.payload)
        return self._data

    def store_data(self) -> str:
        """The JSON text to persist: like ``data``, without storing a message twice.

        A ``new_message`` description is a short prefix followed by the XML rendering of the
        message that ``extra_data.full_message`` already holds. The stored description keeps
        only the prefix (with ``description_xml: true``); ``from_record`` rebuilds the rest,
        so a large message costs its size once in the store, not twice.
        """
        message = self.extra_data.get("full_message") if self._raw is None else None
        if not isinstance(message, dict):
            return self.data
        text = self._message_text
        if text is not None and text.message is message:
            # The description is the prefix and this message's XML by construction.
            return compact_json(
                {
                    "timestamp": self.timestamp,
                    "description": text.prefix,
                    "task_id": self.task_id,
                    "extra_data": self.extra_data,
                    _XML_FLAG: True,
                }
            )
        description = self.description
        try:
            xml = build_mail_xml(message)["content"]  # type: ignore[arg-type]
        except (KeyError, TypeError):
            return self.data
        if not xml or not description.endswith(xml):
            return self.data
        payload = dict(self.payload)
        payload["description"] = description[: len(description) - len(xml)]
        payload[_XML_FLAG] = True
        return compact_json(payload)

    def to_record(self, parsed: bool = False) -> dict[str, Any]:
        """Serialised form used by /message show_events (parsed) and /tasks (raw string)."""
        return {
            "event": self.event,
            "id": self.id,
            "data": self.payload if parsed else self.data,
            "retry": None,
            "comment": None,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TaskEvent:
        raw = record.get("data")
        data = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
        if data.pop(_XML_FLAG, False):
            # Stored by `store_data`: rebuild the description from the message it renders.
            message = (data.get("extra_data") or {}).get("full_message")
            try:
                xml = build_mail_xml(message)["content"] if isinstance(message, dict) else ""  # type: ignore[arg-type]
            except (KeyError, TypeError):  # a message that never rendered: keep the prefix
                xml = ""
            data["description"] = f"{data.get('description', '')}{xml}"
            raw = None
        event = cls(
            str(record.get("event") or "message"),
            str(data.get("task_id", "")),
            str(data.get("description", "")),
            data.get("extra_data") or {},
            event_id=record.get("id"),
            timestamp=data.get("timestamp"),
        )
        if isinstance(raw, str):
            event._data = raw
        return event

    def __repr__(self) -> str:
        return f"TaskEvent({self.event!r}, id={self.id!r}, task_id={self.task_id!r})"


def closing_event(name: str, task_id: str, response: str, state: str | None = None) -> TaskEvent:
    """The last event of a task's stream (``task_complete`` or ``task_error``): not stored,
    no id; it carries the task's answer (or what went wrong) as ``response``, and with
    `state` the state that answer left the task in (given when it is not ``completed``)."""
    payload = {"timestamp": utc_now_iso(), "task_id": task_id, "response": response}
    if state is not None:
        payload["state"] = state
    return TaskEvent(name, task_id, "", raw_payload=payload)
