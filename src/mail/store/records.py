"""What the stores share: instance keys, snapshots, task records, and the JSON helpers.

The task store itself, `TaskStore`, is in `mail.store.base`."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Task record fields that have their own column in the `tasks` table; any other key of a
# record is kept too (in a JSON side column) and comes back merged into the record.
TASK_FIELDS: tuple[str, ...] = (
    "task_id",
    "task_owner",
    "task_contributors",
    "remote_swarms",
    "is_running",
    "completed",
    "title",
    "start_time",
)


# States (the `state` a task record carries) of a task that neither runs nor waits.
FINISHED_STATES = ("completed", "failed", "stopped")

# The table of idempotency keys (mail.store.idempotency), named here for the stores that
# remove a task's keys with it.
IDEMPOTENCY_TABLE = "idempotency_keys"
# The content type recorded as the outcome of a streamed answer, with no body: its key counts
# as answered, and a repeat is answered from the work's own records (``POST /message``: the
# task's events), never replayed from the key.
STREAMED_OUTCOME = "text/event-stream"


@dataclass(frozen=True)
class InstanceKey:
    """Identifies one swarm instance: which swarm, serving which caller.

    `caller_role` is one of "admin", "agent", "user" or "swarm" (interswarm callers).
    """

    swarm_name: str
    caller_role: str
    caller_id: str


@dataclass
class InstanceSnapshot:
    """Everything a store holds for one instance, as returned by `TaskStore.load_instance`.

    - `tasks`: task_id -> task record (see `TaskStore.upsert_task`)
    - `events`: task_id -> events in the order they were appended
    - `histories`: (task_id, agent_name) -> the agent's LLM history for that task
    - `responses`: task_id -> the task's final response (a MAILMessage dict)
    - `queues`: task_id -> stashed queue items of a paused task
    """

    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    histories: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.tasks or self.events or self.histories or self.responses or self.queues)

    def histories_for_task(self, task_id: str) -> dict[str, list[dict[str, Any]]]:
        """agent_name -> history for one task (convenience for rebuilding a task)."""
        return {agent: h for (tid, agent), h in self.histories.items() if tid == task_id}


class StoreUnavailableError(RuntimeError):
    """The backing database cannot be reached (at start-up or for a read)."""


# -- helpers shared by the implementations ------------------------------------------------


def detect_tool_format(history: list[dict[str, Any]]) -> str:
    """'completions' when the first entry is a chat message (has `role`), else 'responses'."""
    if history and isinstance(history[0], Mapping) and "role" in history[0]:
        return "completions"
    return "responses"


def _json_default(obj: Any) -> Any:
    # Histories may hold SDK objects (pydantic models from LiteLLM, dataclasses, sets);
    # store their data rather than failing the runtime's call.
    model_dump = getattr(obj, "model_dump", None)
    if callable(model_dump):
        return model_dump()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, _dt.datetime | _dt.date):
        return obj.isoformat()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    return str(obj)


_orjson: Any
try:  # not a declared dependency (as in mail.core.events): used when installed
    import orjson as _orjson

    # Datetimes and dataclasses go to `_json_default` as with the stdlib: the same text.
    _ORJSON_OPTIONS = _orjson.OPT_PASSTHROUGH_DATETIME | _orjson.OPT_PASSTHROUGH_DATACLASS
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


def to_json(value: Any) -> str:
    """Compact JSON text; what every store keeps, so they behave identically.

    orjson when installed (histories are the bulk of what a store encodes; it is several
    times faster), the stdlib for what orjson refuses (non-string keys, integers beyond 64
    bits). NaN and infinities are written as null on either path, as JSON has no such
    numbers (PostgreSQL's jsonb refuses the stdlib's `NaN`: a record or history holding one
    beside a big integer was dropped there, and orjson cannot read it back in `mail_merge`).
    """
    if _orjson is not None:
        try:
            return _orjson.dumps(value, default=_json_default, option=_ORJSON_OPTIONS).decode()  # type: ignore[no-any-return]
        except TypeError:
            pass
    try:
        return _stdlib_json(value, allow_nan=False)
    except ValueError:  # NaN or an infinity: null, as orjson writes them
        finite = _finite(json.loads(_stdlib_json(value)))
        return _stdlib_json(finite)


def _stdlib_json(value: Any, allow_nan: bool = True) -> str:
    return json.dumps(
        value,
        default=_json_default,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=allow_nan,
    )


def _finite(value: Any) -> Any:
    """`value` (parsed JSON) with each NaN or infinity replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def json_copy(value: Any) -> Any:
    """A deep, JSON-normalised copy (tuples become lists, SDK objects become dicts)."""
    return json.loads(to_json(value))


def parse_start_time(value: Any) -> _dt.datetime:
    """Parse an ISO 8601 start time (or datetime); naive values are taken as UTC."""
    if isinstance(value, _dt.datetime):
        parsed = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            parsed = _dt.datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValueError(f"start_time is not an ISO 8601 timestamp: {value!r}") from exc
    else:
        raise ValueError(f"start_time must be an ISO 8601 string, got {type(value).__name__}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_dt.UTC)
    return parsed.astimezone(_dt.UTC)


def normalize_start_time(value: Any) -> str:
    """The canonical ISO form both stores return: UTC with an explicit offset."""
    return parse_start_time(value).isoformat()


# A task record is written several times with the same start time: its text is parsed once
# (a cache hit costs a tenth of the parse; a bad value raises and is not cached).
_normalize_start_text = functools.lru_cache(maxsize=4096)(normalize_start_time)


def split_task_record(
    record: Mapping[str, Any], copy: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a record into (column fields without None values, extra fields).

    With `copy`, the list columns and the extra fields are JSON-normalised deep copies (what
    the memory store keeps); without, they are shallow copies for a caller that encodes them
    at once. Raises ValueError when the record has no usable task_id.
    """
    task_id = record.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise ValueError("task record needs a non-empty string 'task_id'")
    columns: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, value in record.items():
        if name in TASK_FIELDS:
            if value is not None:
                columns[name] = value
        else:
            extra[name] = value
    if "start_time" in columns:
        start_time = columns["start_time"]
        columns["start_time"] = (
            _normalize_start_text(start_time)
            if type(start_time) is str
            else normalize_start_time(start_time)
        )
    for list_field in ("task_contributors", "remote_swarms"):
        if list_field in columns:
            listed = list(columns[list_field])
            columns[list_field] = json_copy(listed) if copy else listed
    for flag in ("is_running", "completed"):
        if flag in columns:
            columns[flag] = bool(columns[flag])
    return columns, json_copy(extra) if copy else extra


def event_row(event: Any) -> tuple[str | None, str | None, str | None]:
    """(event, data, id) of a mapping or a ServerSentEvent-like object (`.event`, `.data`,
    `.id`), data as text (dicts encoded as compact JSON). The SQL stores' hot path: 9 events a
    request."""
    if isinstance(event, Mapping):
        name, data, event_id = event.get("event"), event.get("data"), event.get("id")
    else:
        name = getattr(event, "event", None)
        # TaskEvents store a message once even when their description repeats it.
        store_data = getattr(event, "store_data", None)
        data = store_data() if callable(store_data) else getattr(event, "data", None)
        event_id = getattr(event, "id", None)
    if type(name) is str and type(data) is str and (event_id is None or type(event_id) is str):
        return name, data, event_id  # a runtime TaskEvent: text already
    if data is not None and not isinstance(data, str):
        data = to_json(data)
    return (
        None if name is None else str(name),
        data,
        None if event_id is None else str(event_id),
    )
