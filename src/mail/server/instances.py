"""Per-caller swarm instances: created on first use, isolated, reclaimed when idle."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mail.core.agent_wiring import function_chain
from mail.utils.background import hold

logger = logging.getLogger("mail.server.instances")

INSTANCE_KINDS = ("admin", "user", "swarm")
_SHUTDOWN_GRACE = 5.0

# Seconds during which another server's claim of an instance keeps a starting server from
# resuming its tasks (two servers started together on one database: one resumes them).
RESUME_CLAIM_WINDOW = 30.0

# How a start-up resume makes one caller's instance run, given its store key (`InstanceKey`):
# True once it runs, False when it is left to another server.
ResumeStep = Callable[[Any], Awaitable[bool]]


class ArchivedTask(dict[str, Any]):
    """The record of a task archived with its reclaimed instance (`Task.to_dict`), and its
    answer (the body of its last response) beside it, not in it: the record's JSON (``GET
    /task``, ``GET /tasks``) stays what it was, and a replay of its events (``GET
    /task/events``, a keyed stream's repeat) still closes with the task's answer."""

    answer: str = ""
    # The files its actions wrote (`MAILTask.files`), removed with it by retention.
    files: dict[str, list[int]] | None = None


def _answer_of(response: Any) -> str:
    message = response.get("message") if isinstance(response, dict) else None
    return str(message.get("body", "")) if isinstance(message, dict) else ""


def instance_kind(role: str) -> str:
    """Map a caller role to an instance kind (``agent`` callers are remote swarms)."""
    return "swarm" if role == "agent" else role


@dataclass(eq=False)
class Instance:
    kind: str
    id: str
    swarm: Any
    loop_task: asyncio.Task[Any]
    api_key: str
    created_at: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    in_use: int = 0
    # task id -> monotonic time a request claimed it (between its checks and its submission)
    claimed_tasks: dict[str, float] = field(default_factory=dict)
    # Made at start-up to continue its stored running tasks, without the caller's key.
    keyless: bool = False

    def __post_init__(self) -> None:
        self.key = (self.kind, self.id)  # (a plain attribute: read on every request)

    @property
    def owner(self) -> str:
        return f"{self.kind}:{self.id}"

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def is_running(self) -> bool:
        return not self.loop_task.done()

    def committed(self) -> Awaitable[object] | None:
        """What a stream of this instance's events awaits before sending them: the commit of
        what the instance wrote so far (None: nothing to wait for, as on the memory store)."""
        observer = getattr(getattr(self.swarm, "runtime", None), "observer", None)
        return None if observer is None else observer.committed()

    def has_running_tasks(self) -> bool:
        try:
            tasks = self.swarm.get_all_tasks()
        except Exception:  # a broken instance shouldn't block reclaiming
            return False
        return any(getattr(t, "is_running", False) for t in tasks.values())


def _holder() -> str:
    """Who claims an instance's fencing generation here (kept with the claim): this process."""
    return f"{socket.gethostname()}:{os.getpid()}:server"


def _died_here(holder: str) -> bool:
    """Whether `holder` (a `_holder()`) was a process of this machine that is gone: a server
    restarted after a kill -9 resumes its running tasks at once, not after the claim window."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's process)
        return False
    return False


def _reraise_own_cancellation() -> None:
    """Inside ``except BaseException``: re-raise when the running task itself is being
    cancelled (its canceller must see that), not when what it awaited was cancelled."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise  # noqa: PLE0704 - called from an except block, re-raises what it caught


async def maybe_await(value: Any) -> Any:
    """`value`, awaited when it is awaitable (a swarm's or a store's hook may be either)."""
    if inspect.isawaitable(value):
        return await value
    return value


class InstanceManager:
    """Owns every instance of one server. All methods run on the server's event loop."""

    def __init__(
        self,
        template_getter: Callable[[], Any],
        *,
        swarm_name: str,
        base_url: str,
        registry_file: str | None,
        print_llm_streams: bool,
        task_message_limit: int | None,
        idle_timeout: float,
        store: Any | None = None,
        on_create: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self._template_getter = template_getter
        # Called with each new MAILSwarm before its loop starts (e.g. to connect interswarm).
        self.on_create = on_create
        self.swarm_name = swarm_name
        self.base_url = base_url
        self.registry_file = registry_file
        self.print_llm_streams = print_llm_streams
        self.task_message_limit = task_message_limit
        # Loop bounds of every instance's runtime ([server.settings]; see core/loop_guard.py).
        from mail.core import loop_guard

        self.task_turn_limit: int | None = loop_guard.DEFAULT_TASK_TURN_LIMIT
        self.task_repeat_limit: int | None = loop_guard.DEFAULT_TASK_REPEAT_LIMIT
        self.task_no_tool_call_limit: int | None = loop_guard.DEFAULT_TASK_NO_TOOL_CALL_LIMIT
        self.idle_timeout = idle_timeout
        self.store = store
        # Shared agent memory (acknowledge_broadcast); PostgreSQL-backed with DATABASE_URL.
        self.agent_memory: Any | None = None
        # Threads, inboxes and attachments (mail.store.team_*), shared by every instance.
        self.team_store: Any | None = None
        self.team_settings: Any | None = None
        # characters; applied to each new instance's runtime (None = no cap)
        self.max_message_body: int | None = None
        # False: an instance loads only its running and paused tasks from the store (the
        # server reads finished ones from there when asked, see finished_tasks.py).
        self.load_finished = True
        # Push delivery: called with each new MAILSwarm and its InstanceKey, after its store
        # is attached, so the instance records its webhook events (mail.server.webhooks).
        self.attach_outbox: Callable[[Any, Any], None] | None = None
        # Without a store: called with an instance reclaimed while idle, its tasks archived
        # (`FinishedTasks.book_archived`: the ones the sweep had not booked yet go in now).
        self.on_archive: Callable[[Instance], None] | None = None
        # Under a byte bound: the books each new instance's runtime books what its tasks
        # store into, as it records it (`finished_tasks.CallerLedger`; mail.core.stored_bytes).
        self.ledger_for: Callable[[tuple[str, str]], Any] | None = None
        self._instances: dict[tuple[str, str], Instance] = {}
        self._creating: dict[tuple[str, str], asyncio.Task[Instance]] = {}
        self._archived: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._resumer: asyncio.Task[int] | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        # Instances whose fencing generation this server claimed (start-up resume on a
        # shared database): a later claim by another server stops them (`_lost`).
        self._claimed: set[tuple[str, str]] = set()
        self._fresh_claims: set[tuple[str, str]] = set()  # claimed, not made yet
        self._closed = False
        self._closing = asyncio.Event()  # set by close(): the reaper ends after its current round

    # -- lookup ---------------------------------------------------------------------------

    def peek(self, role: str, caller_id: str) -> Instance | None:
        return self._instances.get((instance_kind(role), caller_id))

    async def loaded(self, role: str, caller_id: str) -> Instance | None:
        """The caller's instance when it is in memory or being loaded (then once it is);
        None otherwise: nothing is created."""
        key = (instance_kind(role), caller_id)
        pending = self._creating.get(key)
        if pending is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(pending)
        return self._instances.get(key)

    def count(self, kind: str) -> int:
        return sum(1 for k in self._instances if k[0] == kind)

    def all(self) -> list[Instance]:
        return list(self._instances.values())

    async def get(self, role: str, caller_id: str, api_key: str) -> Instance:
        """The caller's instance, created (once) if needed."""
        key = (instance_kind(role), caller_id)
        inst = self._instances.get(key)
        if inst is not None and inst.is_running():
            inst.touch()
            return inst
        if self._closed:
            raise RuntimeError("server is shutting down")
        pending = self._creating.get(key)
        if pending is None:
            pending = asyncio.create_task(
                self._create(key, api_key, replacing=inst, keyless=not api_key),
                name=f"mail-create-{key[0]}:{key[1]}",
            )
            self._creating[key] = pending
            pending.add_done_callback(functools.partial(self._forget_creation, key))
        return await asyncio.shield(pending)

    def _forget_creation(self, key: tuple[str, str], _task: asyncio.Task[Instance]) -> None:
        self._creating.pop(key, None)

    async def _create(
        self,
        key: tuple[str, str],
        api_key: str,
        replacing: Instance | None = None,
        keyless: bool = False,
    ) -> Instance:
        kind, caller_id = key
        if key in self._claimed and key not in self._fresh_claims:
            # Made again where another server may have claimed it since: this one's writes
            # must win from now on (the other stops its copy at its next write).
            await self._claim(key)
        self._fresh_claims.discard(key)
        if replacing is not None:
            # Its runtime loop died (it shouldn't); replace the instance rather than hang.
            logger.error("instance %s:%s had stopped; creating a new one", *key)
            if self._instances.get(key) is replacing:
                del self._instances[key]
                if self.store is None:
                    self._archive(replacing)  # its tasks stay listed in GET /tasks
            await self._stop(replacing)
        template = self._template_getter()
        swarm = template.instantiate(
            instance_params={"user_token": api_key},
            user_id=caller_id,
            user_role=kind,
            base_url=self.base_url,
            registry_file=self.registry_file,
            print_llm_streams=self.print_llm_streams,
        )
        from mail.store import InstanceKey

        store_key = InstanceKey(self.swarm_name, kind, caller_id)
        if self.store is not None:
            attach = getattr(swarm, "attach_store", None)
            if attach is not None:
                loading = {} if self.load_finished else {"load_finished": False}
                await maybe_await(attach(self.store, store_key, **loading))
            else:
                logger.warning(
                    "this MAILSwarm has no attach_store(); persistence is off for %s:%s",
                    kind,
                    caller_id,
                )
        if self.attach_outbox is not None:
            self.attach_outbox(swarm, store_key)
        if self.agent_memory is not None:
            swarm.runtime.memory = self.agent_memory
        guard = getattr(getattr(swarm, "runtime", None), "loop_guard", None)
        if guard is not None:
            guard.max_turns = self.task_turn_limit
            guard.max_repeats = self.task_repeat_limit
            guard.max_no_tool_calls = self.task_no_tool_call_limit
        if self.team_store is not None and hasattr(swarm, "attach_team_store"):
            swarm.attach_team_store(self.team_store, self.team_settings, store_key)
        if self.max_message_body is not None:
            swarm.runtime.max_message_body = self.max_message_body
        if self.ledger_for is not None:
            swarm.runtime.stored_bytes.ledger = self.ledger_for(key)
        if self.on_create is not None:
            await self.on_create(swarm)
        loop_task = asyncio.create_task(
            swarm.run_continuous(max_steps=self.task_message_limit),
            name=f"mail-runtime-{kind}:{caller_id}",
        )
        # Let the loop take its first step, so that requests queue on it rather than each
        # starting a temporary loop it would then have to take over from.
        await asyncio.sleep(0)
        inst = Instance(kind=kind, id=caller_id, swarm=swarm, loop_task=loop_task, api_key=api_key)
        inst.keyless = keyless
        self._instances[key] = inst
        logger.info("created %s instance for %s", kind, caller_id)
        return inst

    @contextlib.asynccontextmanager
    async def lease(self, inst: Instance) -> AsyncIterator[Instance]:
        """Mark ``inst`` busy for the duration of a request or stream (blocks reclaiming)."""
        inst.in_use += 1
        inst.touch()
        try:
            yield inst
        finally:
            inst.in_use -= 1
            inst.touch()

    # -- task records ---------------------------------------------------------------------

    def archived_tasks(self, role: str, caller_id: str) -> dict[str, dict[str, Any]]:
        return self._archived.get((instance_kind(role), caller_id), {})

    # -- reclaim & shutdown ---------------------------------------------------------------

    def start(self) -> None:
        if self.idle_timeout > 0 and self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_loop(), name="mail-instance-reaper")

    async def _reap_loop(self) -> None:
        # close() does not cancel this loop: a cancellation landing while an instance is being
        # stopped would leave that instance half stopped (it is no longer listed). It sets
        # `_closing` instead, and the loop ends after the round in progress.
        interval = max(0.05, min(60.0, self.idle_timeout / 4))
        while not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._closing.wait()
            if self._closing.is_set():
                return
            try:
                await self.reclaim_idle()
            except Exception:
                logger.exception("error while reclaiming idle instances")

    def _reclaimable(self, inst: Instance, now: float) -> bool:
        return (
            inst.in_use == 0
            and (inst.keyless or now - inst.last_used >= self.idle_timeout)
            and not inst.has_running_tasks()
        )

    async def reclaim_idle(self, now: float | None = None) -> list[tuple[str, str]]:
        now = time.monotonic() if now is None else now
        victims = [inst for inst in self._instances.values() if self._reclaimable(inst, now)]
        reclaimed = []
        for inst in victims:
            # Checked again: a request may have leased it while an earlier victim was stopping.
            if self._instances.get(inst.key) is not inst or not self._reclaimable(inst, now):
                continue
            del self._instances[inst.key]
            if self.store is None:
                self._archive(inst)
                if self.on_archive is not None:
                    self.on_archive(inst)
            reclaimed.append(inst.key)
            await self._stop(inst)
            logger.info("reclaimed idle %s instance for %s", inst.kind, inst.id)
        return reclaimed

    def _archive(self, inst: Instance) -> None:
        try:
            records: dict[str, ArchivedTask] = {}
            for tid, task in inst.swarm.get_all_tasks().items():
                if tid != "*":
                    record = records[tid] = ArchivedTask(task.to_dict())
                    record.answer = _answer_of(task.response)
                    record.files = task.files or None
        except Exception:
            logger.exception("could not archive the tasks of %s:%s", inst.kind, inst.id)
            return
        if records:
            self._archived.setdefault(inst.key, {}).update(records)

    async def _stop(self, inst: Instance) -> None:
        try:
            await maybe_await(inst.swarm.shutdown())
        except Exception:
            logger.exception("error shutting down %s instance %s", inst.kind, inst.id)
        if not inst.loop_task.done():
            try:
                await asyncio.wait_for(asyncio.shield(inst.loop_task), _SHUTDOWN_GRACE)
            except TimeoutError:
                inst.loop_task.cancel()
            except BaseException:
                _reraise_own_cancellation()  # the loop's own end (even a cancelled one) is fine
        if not inst.loop_task.done():
            inst.loop_task.cancel()
        try:
            await inst.loop_task
        except BaseException:
            _reraise_own_cancellation()

    # -- start-up resume ------------------------------------------------------------------

    def resume_soon(self, limit: int, load: ResumeStep | None = None) -> None:
        """Start (once, in the background) loading the instances of up to ``limit`` callers
        with running tasks in the store, so those tasks continue (see the module's doc)."""
        if self.store is None or limit <= 0 or self._resumer is not None:
            return
        self._resumer = asyncio.create_task(
            self.resume_running(limit, load), name="mail-resume-running-tasks"
        )

    async def resume_running(self, limit: int, load: ResumeStep | None = None) -> int:
        """Load, one after another, the instances of up to ``limit`` callers that have running
        tasks in the store; returns how many were loaded. ``load`` makes one caller's instance
        run, given its store key (False: left to another server); by default here. Where it
        runs elsewhere (a cluster's instance host), a failure leaves the tasks to the caller's
        next request."""
        from mail.store import lifecycle_for

        lifecycle = lifecycle_for(self.store)
        if lifecycle is None or limit <= 0:
            return 0
        try:
            keys = await lifecycle.running_callers(self.swarm_name, limit + 1)
        except Exception as exc:  # noqa: BLE001 - they continue at their callers' requests
            logger.warning("cannot look for running tasks to continue: %s", exc)
            return 0
        if len(keys) > limit:
            logger.warning(
                "more than %d callers have running tasks: the instances of %d are loaded now, "
                "the others' tasks continue at their caller's next request "
                "([server.settings] resume_instances_at_start)",
                limit,
                limit,
            )
        if keys and self._needs_callers_key():
            logger.warning(
                "running tasks continue at their callers' next request: the agents call the "
                "LiteLLM proxy with the caller's API key, which is not kept (set "
                "LITELLM_PROXY_API_KEY, or an api_key in agent_params, to continue them at "
                "start-up)"
            )
            return 0
        loaded = 0
        for store_key in keys[:limit]:
            key = (store_key.caller_role, store_key.caller_id)
            if self._closed:
                break
            if key in self._instances or key in self._creating:
                continue  # its caller came first
            try:
                if not await (load or self._resume_here)(store_key):
                    continue
            except Exception as exc:  # noqa: BLE001 - one caller must not stop the others
                if self._closed:
                    break
                await self._unresumable(lifecycle, store_key, exc, later=load is not None)
                continue
            loaded += 1
            logger.info("continuing the running tasks of %s:%s", *key)
        return loaded

    def _needs_callers_key(self) -> bool:
        """Whether the template's agents call their model with the caller's API key, which an
        instance loaded without a request of its caller does not have."""
        template = self._template_getter()
        try:
            keyless = {"user_token": ""}  # as `_create` builds it without a key
            agents = [a.instantiate(keyless, template.exclude_tools) for a in template.agents]
        except Exception:  # noqa: BLE001 - the instance fails to build too: reported there
            return False
        return any(
            getattr(fn, "missing_caller_key", False)
            for a in agents
            for fn in function_chain(a.function)  # v1.3's function factories wrap theirs
        )

    async def _resume_here(self, store_key: Any) -> bool:
        key = (store_key.caller_role, store_key.caller_id)
        # Other servers may use a PostgreSQL store: claims fence them off.
        shared = hasattr(self.store, "claim_unless_fresh")
        if shared and not await self._claim_unless_served(store_key):
            logger.info(
                "the running tasks of %s:%s are left to the server that claimed its instance",
                *key,
            )
            return False
        await self.get(key[0], key[1], "")
        return True

    def _watch_claims(self, key: tuple[str, str]) -> Any:
        store = self.store
        assert store is not None
        if getattr(store, "on_fenced", None) is None:
            store.on_fenced = self._lost
        self._claimed.add(key)
        return store

    async def _claim_unless_served(self, store_key: Any) -> bool:
        """Claim the instance for its start-up resume, unless another server claimed it moments
        ago (two servers started together: one resumes it)."""
        key = (store_key.caller_role, store_key.caller_id)
        store = self._watch_claims(key)
        claimed = await store.claim_unless_fresh(
            store_key, _holder(), RESUME_CLAIM_WINDOW, _died_here
        )
        if claimed is None:
            if store.held_generation(store_key) is None:  # (else a caller's request claimed it)
                self._claimed.discard(key)
            return False
        if key not in self._instances and key not in self._creating:
            self._fresh_claims.add(key)  # (else its caller came first and claimed it too)
        return True

    async def _claim(self, key: tuple[str, str]) -> None:
        from mail.store import InstanceKey

        store = self._watch_claims(key)
        await store.claim_generation(InstanceKey(self.swarm_name, *key), _holder())

    def _lost(self, store_key: Any) -> None:
        """Another server claimed this instance after us: stop our copy (its writes are
        dropped from now on); a request here makes it again, claiming it back."""
        inst = self._instances.pop((store_key.caller_role, store_key.caller_id), None)
        if inst is None:
            return
        logger.warning(
            "instance %s:%s was taken over by another server sharing the database; stopping "
            "it here",
            inst.kind,
            inst.id,
        )
        hold(self._stopping, asyncio.get_running_loop().create_task(self._stop(inst)))

    async def _unresumable(self, lifecycle: Any, key: Any, exc: BaseException, later: bool) -> None:
        """The caller's instance cannot be made: its running tasks are marked failed (unless
        ``later`` or the database is only out of reach now: then its caller's next request
        loads it)."""
        from mail.store.base import StoreUnavailableError

        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if later or isinstance(exc, StoreUnavailableError):
            logger.warning(
                "cannot continue the running tasks of %s:%s now (%s); they continue at its "
                "next request",
                key.caller_role,
                key.caller_id,
                reason,
            )
            return
        logger.warning(
            "cannot load the instance of %s:%s to continue its running tasks; they are marked "
            "failed: %s",
            key.caller_role,
            key.caller_id,
            reason,
        )
        try:
            await _fail_running_tasks(self.store, lifecycle, key, reason)
        except Exception:
            logger.exception(
                "could not mark the tasks of %s:%s failed", key.caller_role, key.caller_id
            )

    async def close(self) -> None:
        """Shut every instance down (admin, then user, then swarm, as the original)."""
        self._closed = True
        self._closing.set()
        if self._resumer is not None:
            self._resumer.cancel()
            with contextlib.suppress(BaseException):
                await self._resumer
        for stopping in list(self._stopping):
            with contextlib.suppress(BaseException):
                await stopping
        if self._reaper is not None:
            try:
                # It ends after the reclaim round in progress, if any (bounded like a stop).
                async with asyncio.timeout(2 * _SHUTDOWN_GRACE):
                    await asyncio.shield(self._reaper)
            except TimeoutError:
                self._reaper.cancel()
            except Exception:
                logger.exception("the idle-instance reaper failed")
            self._reaper = None
        for pending in list(self._creating.values()):
            with contextlib.suppress(BaseException):
                await pending
        for kind in INSTANCE_KINDS:
            group = [inst for key, inst in self._instances.items() if key[0] == kind]
            await asyncio.gather(*(self._stop(inst) for inst in group))
            for inst in group:
                self._instances.pop(inst.key, None)


async def _fail_running_tasks(store: Any, lifecycle: Any, key: Any, reason: str) -> None:
    """Mark the running tasks of an instance that cannot be loaded failed, in the store, with
    ``reason`` as their answer (what `GET /task` shows once its caller asks)."""
    from mail.core.runtime_durable import journal_key
    from mail.core.system_messages import system_task_end, task_error_body
    from mail.core.tasks import TaskState, state_from_record

    records = await lifecycle.records(key)
    for task_id, record in records.items():
        if not record.get("is_running") or state_from_record(record) is not TaskState.RUNNING:
            continue
        answer = system_task_end(
            key.swarm_name,
            task_id,
            "::task_error::",
            task_error_body(f"its instance could not be loaded after a restart ({reason})"),
        )
        await store.upsert_task(
            key, {"task_id": task_id, "is_running": False, "completed": True, "state": "failed"}
        )
        await store.save_response(key, task_id, answer)
        await store.delete_queue(key, journal_key(task_id))
    await store.flush(_SHUTDOWN_GRACE)
