"""The persistence interface the runtime and the server talk to."""

from __future__ import annotations

import abc
import dataclasses
import datetime as _dt
import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mail.store.fencing import FenceState

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


# Called once with the key of an instance whose lease a newer host took (see fencing.py).
FencedCallback = Callable[[InstanceKey], object]


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


class TaskStore(abc.ABC):
    """Persistence for task records, events, agent histories, responses and stashed queues.

    Usage from the runtime::

        store = create_store(os.environ.get("DATABASE_URL"))
        await store.start()
        snapshot = await store.load_instance(key)     # recovery on instance start
        await store.upsert_task(key, {...})            # returns at once
        ...
        await store.close()                            # flushes, then releases resources

    Writes for the same key and task are applied in the order they were submitted.

    Fencing (cluster mode): after `claim_generation(key)`, every write this store makes
    for `key` is applied only while no other store has claimed a newer generation for it;
    later writes are dropped, counted in `fenced_writes`, and `is_fenced(key)` turns true
    (`on_fenced(key)` is called once). Keys never claimed are not checked at all.
    """

    def __init__(self) -> None:
        self._fencing: FenceState[InstanceKey] = FenceState()

    # -- lifecycle -------------------------------------------------------------------
    @abc.abstractmethod
    async def start(self) -> None:
        """Open connections / prepare the schema. Raises StoreUnavailableError on failure."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Flush what can be flushed (bounded wait), then release resources. Idempotent."""

    @abc.abstractmethod
    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write acknowledged so far is durably stored.

        Returns True when drained, False if `timeout` (seconds) ran out first.
        """

    async def settle(self) -> None:
        """Before a read: every write acknowledged so far is visible to it (read-your-writes).
        Raises StoreUnavailableError when it cannot be (the database does not take writes)."""
        await self.flush()

    # -- writes (acknowledged on return, applied in submission order) -------------------
    @abc.abstractmethod
    async def upsert_task(self, key: InstanceKey, record: Mapping[str, Any]) -> None:
        """Create or update a task record.

        Record fields: task_id (required), task_owner, task_contributors (list),
        remote_swarms (list), is_running, completed, title, start_time (ISO 8601).
        A field that is absent or None leaves the stored value unchanged, so the runtime
        can send only what changed (e.g. ``{"task_id": t, "is_running": False}``).
        Other keys are stored as well and returned merged into the record.
        """

    @abc.abstractmethod
    async def append_event(self, key: InstanceKey, task_id: str, event: Any) -> None:
        """Append one SSE event to a task's timeline.

        `event` is a dict ``{"event", "data" (str; a dict is JSON-encoded), "id"}`` or an
        object with those attributes (e.g. `sse_starlette.ServerSentEvent`, `TaskEvent`).
        """

    @abc.abstractmethod
    async def save_history(
        self,
        key: InstanceKey,
        task_id: str,
        agent_name: str,
        tool_format: str | None,
        history: list[dict[str, Any]],
    ) -> None:
        """Store an agent's full history for a task, REPLACING any earlier one.

        `tool_format` is "completions" or "responses"; None means "detect from the
        history" (see `detect_tool_format`).
        """

    @abc.abstractmethod
    async def save_response(
        self, key: InstanceKey, task_id: str, response: Mapping[str, Any]
    ) -> None:
        """Store (or replace) a task's final response."""

    @abc.abstractmethod
    async def save_queue(self, key: InstanceKey, task_id: str, items: list[dict[str, Any]]) -> None:
        """Store the stashed queue of a paused task: ``[{"priority", "seq", "message"}, ...]``."""

    @abc.abstractmethod
    async def delete_queue(self, key: InstanceKey, task_id: str) -> None:
        """Forget the stashed queue of a task (after it was resumed or finished)."""

    # -- fencing (cluster mode) ------------------------------------------------------------
    @abc.abstractmethod
    async def claim_generation(self, key: InstanceKey, holder: str = "") -> int:
        """Become the owner of `key`: atomically increment and return its generation.

        From then on this store's writes for `key` carry that generation and are dropped
        once anyone claims a newer one. `holder` is a free-form label (node, process) kept
        with the claim for operators. Claim BEFORE `load_instance`, so that the state read
        includes every write the previous owner managed to commit and nothing after it.
        Raises StoreUnavailableError when the database cannot be reached.
        """

    def held_generation(self, key: InstanceKey) -> int | None:
        """The generation this store claimed for `key`, or None if it never claimed one."""
        return self._fencing.leases.get(key)

    def is_fenced(self, key: InstanceKey) -> bool:
        """True once a write for `key` was refused because a newer generation was claimed."""
        return self._fencing.is_fenced(key)

    @property
    def on_fenced(self) -> FencedCallback | None:
        """Called with the key, once, when this store learns it lost `key`.

        It runs in the store's writer (PostgreSQL) or in the writing coroutine (memory):
        it must return quickly (e.g. schedule the instance's shutdown, do not await it).
        """
        return self._fencing.on_fenced

    @on_fenced.setter
    def on_fenced(self, callback: FencedCallback | None) -> None:
        self._fencing.on_fenced = callback

    @property
    def fenced_writes(self) -> int:
        """Writes dropped because their generation was no longer the current one."""
        return self._fencing.fenced_writes

    # -- reads ----------------------------------------------------------------------------
    @abc.abstractmethod
    async def load_instance(self, key: InstanceKey) -> InstanceSnapshot:
        """Everything stored for one instance, including writes still being flushed."""

    # -- health (for the server's status reporting) --------------------------------------
    @property
    def pending_writes(self) -> int:
        """Writes acknowledged but not yet durably stored."""
        return 0

    @property
    def failed_attempts(self) -> int:
        """Write attempts that failed with a transient error since start (retried)."""
        return 0

    @property
    def last_error(self) -> str | None:
        """Text of the most recent write/connection error, or None if there never was one."""
        return None

    @property
    def backend(self) -> str:
        return type(self).__name__

    def status(self) -> dict[str, Any]:
        """A JSON-able health summary, e.g. for /status or /health."""
        return {
            "backend": self.backend,
            "pending_writes": self.pending_writes,
            "failed_attempts": self.failed_attempts,
            "last_error": self.last_error,
            "degraded": self.is_degraded(),
            "fenced_writes": self.fenced_writes,
        }

    def is_degraded(self) -> bool:
        """True while writes are failing and piling up."""
        return False

    def writes_backed_up(self) -> bool:
        """True while the store's queue of unwritten writes is at its bound (`max_pending`):
        new work would only wait in memory (the server refuses new tasks meanwhile)."""
        return False

    async def __aenter__(self) -> TaskStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


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


def normalize_event(event: Any) -> dict[str, Any]:
    """``{"event", "data", "id"}`` with data as text (dicts are encoded as compact JSON).

    Accepts a mapping or a ServerSentEvent-like object with `.event`, `.data`, `.id`.
    """
    name, data, event_id = event_row(event)
    return {"event": name, "data": data, "id": event_id}


def event_row(event: Any) -> tuple[str | None, str | None, str | None]:
    """(event, data, id) of `normalize_event`, without its dict (the SQL stores' hot path:
    9 events a request)."""
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
