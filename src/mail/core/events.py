"""Task event records: what the server streams as SSE and stores per task."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from mail.core.message import build_mail_xml, utc_iso, utc_now_iso

Description = str | Callable[[], str]
# Marks a stored description whose message XML was left out (see TaskEvent.store_data).
_XML_FLAG = "description_xml"
# Names the call whose `tool_call` event holds the arguments a stored description left out
# (an `action_call`'s, see ArgsText).
_ARGS_FLAG = "description_args"
# Names, for each `extra_data` value a stored event left out, the call and the argument of
# the `tool_call` event that holds it (see TaskEvent.share_arguments).
_SHARED_FLAG = "extra_args"
# A value at least this long is looked for among the latest calls' arguments, in the task's
# last LOOKBACK events.
SHARED_MIN = 1024
LOOKBACK = 64


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


class ArgsText:
    """A description that is ``prefix`` followed by a call's arguments as JSON.

    Made for an ``action_call`` event whose arguments are, as the same object, those of the
    latest ``tool_call`` event of the call (`call_id`): the store keeps only the prefix and
    the call id, and `events_from_records` rebuilds the rest from that event, so a large
    argument (a file's content) costs its size once in the store, not twice.
    """

    __slots__ = ("prefix", "args", "call_id")

    def __init__(self, prefix: str, args: Any, call_id: str) -> None:
        self.prefix = prefix
        self.args = args
        self.call_id = call_id

    def __call__(self) -> str:
        return self.prefix + json.dumps(self.args)


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
        "_args_text",
        "_stored",
        "_shared",
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
        self._args_text = description if type(description) is ArgsText else None
        self._stored: str | None = None  # `store_data`, once made
        self._shared: dict[str, list[str]] | None = None  # `share_arguments`
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
        """The JSON text to persist: like ``data``, without storing a message twice; made
        once (what the caller's books count of the event is what its store write takes).

        A ``new_message`` description is a short prefix followed by the XML rendering of the
        message that ``extra_data.full_message`` already holds. The stored description keeps
        only the prefix (with ``description_xml: true``); ``from_record`` rebuilds the rest,
        so a large message costs its size once in the store, not twice. An ``action_call``
        made with `ArgsText` keeps its prefix and the call's id the same way.
        """
        stored = self._stored
        if stored is None:
            stored = self._stored = self._store_text()
        return stored

    def share_arguments(self, earlier: list[TaskEvent]) -> None:
        """Let the store keep once the `extra_data` values that are, as the same objects,
        arguments of the latest `tool_call` event of their call among `earlier` (a thread
        post's body is its call's `body`): left out of this event's stored text and read
        back from that event (`events_from_records`), so what is read is what was shown."""
        if self._raw is not None or self._args_text is not None:
            return
        big: list[tuple[str, str]] = []  # a loop, not a comprehension: most events have none
        for key, value in self.extra_data.items():
            if type(value) is str and len(value) >= SHARED_MIN:
                big.append((key, value))
        if not big:
            return
        shared: dict[str, list[str]] = {}
        for call_id, args in latest_call_args(earlier).items():
            if isinstance(args, dict):
                for name, value in args.items():
                    for key, mine in big:
                        if mine is value and key not in shared:
                            shared[key] = [call_id, name]
        self._shared = shared or None

    def _store_text(self) -> str:
        shared = self._shared
        if shared is not None:
            extra = {k: None if k in shared else v for k, v in self.extra_data.items()}
            return self._flagged(self.description, _SHARED_FLAG, shared, extra)
        args = self._args_text
        if args is not None and self._raw is None:
            return self._flagged(args.prefix, _ARGS_FLAG, args.call_id)
        message = self.extra_data.get("full_message") if self._raw is None else None
        if not isinstance(message, dict):
            return self.data
        text = self._message_text
        if text is not None and text.message is message:
            # The description is the prefix and this message's XML by construction.
            return self._flagged(text.prefix, _XML_FLAG, True)
        description = self.description
        try:
            xml = build_mail_xml(message)["content"]  # type: ignore[arg-type]
        except (KeyError, TypeError):
            return self.data
        if not xml or not description.endswith(xml):
            return self.data
        return self._flagged(description[: len(description) - len(xml)], _XML_FLAG, True)

    def _flagged(
        self, description: str, flag: str, value: Any, extra: dict[str, Any] | None = None
    ) -> str:
        """The stored text of an event (never a raw one) whose `description` (and `extra`
        data) stand shortened, `flag` telling `events_from_records` how to restore them."""
        return compact_json(
            {
                "timestamp": self.timestamp,
                "description": description,
                "task_id": self.task_id,
                "extra_data": self.extra_data if extra is None else extra,
                flag: value,
            }
        )

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
    def from_record(cls, record: dict[str, Any], calls: dict[str, Any] | None = None) -> TaskEvent:
        """An event from its stored record. `calls` (call id -> arguments of the latest
        `tool_call` event read before this one, kept up to date here) rebuilds a description
        stored without its arguments, and values stored without their text; `events_from_records`
        passes it along a task's events."""
        raw = record.get("data")
        data = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
        shared = data.pop(_SHARED_FLAG, None)
        extra = data.get("extra_data")
        if isinstance(shared, dict) and isinstance(extra, dict):
            for key, (call_id, name) in shared.items():
                args = (calls or {}).get(call_id)
                extra[key] = args.get(name) if isinstance(args, dict) else None
            raw = None
        call_id = data.pop(_ARGS_FLAG, None)
        if call_id is not None:
            args = (calls or {}).get(call_id)
            data["description"] = f"{data.get('description', '')}{json.dumps(args)}"
            raw = None
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
        if calls is not None and event.event == "tool_call":
            called = event.extra_data.get("tool_call_id")
            if isinstance(called, str):
                calls[called] = event.extra_data.get("tool_args")
        return event

    def __repr__(self) -> str:
        return f"TaskEvent({self.event!r}, id={self.id!r}, task_id={self.task_id!r})"


def latest_call_args(events: list[TaskEvent]) -> dict[str, Any]:
    """call id -> the arguments of the latest `tool_call` event of each call among the last
    LOOKBACK of `events`."""
    calls: dict[str, Any] = {}
    for event in reversed(events[-LOOKBACK:]):
        if event.event == "tool_call":
            call_id = event.extra_data.get("tool_call_id")
            if isinstance(call_id, str) and call_id not in calls:
                calls[call_id] = event.extra_data.get("tool_args")
    return calls


def events_from_records(records: Iterable[dict[str, Any]]) -> list[TaskEvent]:
    """A task's events from its stored records, in order (see `TaskEvent.from_record`)."""
    calls: dict[str, Any] = {}
    return [TaskEvent.from_record(record, calls) for record in records]


def ping_event(task_id: str) -> TaskEvent:
    """A keep-alive of a task's stream while nothing else happens: not stored, no id."""
    return TaskEvent(
        "ping", task_id, "", raw_payload={"timestamp": utc_now_iso(), "task_id": task_id}
    )


def closing_event(name: str, task_id: str, response: str, state: str | None = None) -> TaskEvent:
    """The last event of a task's stream (``task_complete`` or ``task_error``): not stored,
    no id; it carries the task's answer (or what went wrong) as ``response``, and with
    `state` the state that answer left the task in (given when it is not ``completed``)."""
    payload = {"timestamp": utc_now_iso(), "task_id": task_id, "response": response}
    if state is not None:
        payload["state"] = state
    return TaskEvent(name, task_id, "", raw_payload=payload)
