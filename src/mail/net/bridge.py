"""InterswarmBridge: connects one runtime instance to the interswarm router."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from mail.core.message import (
    MAILInterswarmMessage,
    MAILMessage,
    build_interswarm_mail_xml,
    create_agent_address,
    make_broadcast,
    make_message,
    make_request,
    parse_agent_address,
    parse_task_contributor,
)
from mail.core.runtime_ports import HostLink
from mail.core.system_messages import system_response, system_task_end
from mail.core.tools import AgentToolCall
from mail.net.bridge_inbound import (
    already_received,
    as_message,
    swarm_target_problem,
    task_end,
    user_target_problem,
)
from mail.net.discovery import DiscoveredSwarms
from mail.net.router import InterswarmRouter
from mail.net.trust import (
    TrustError,
    check_existing_task,
    check_new_task,
    check_subject,
    peer_sender,
)
from mail.net.types import InterswarmError
from mail.utils.background import finish, hold

if TYPE_CHECKING:
    from mail.core.runtime import MAILRuntime
    from mail.core.runtime_turns import TurnContext

logger = logging.getLogger("mail.interswarm")
# The namespace of task-end notices' ids (`_notify_end`): one per answer and recipient.
_NOTICE_IDS = uuid.UUID("6f1c3a52-8e0b-4d5e-9a4f-2b7d0c1e9f30")

TASK_COMPLETE_SUBJECT = "::task_complete::"
# A task that ended without task_complete (stopped by a loop bound, a caller's timeout).
TASK_ERROR_SUBJECT = "::task_error::"
TASK_END_SUBJECTS = (TASK_COMPLETE_SUBJECT, TASK_ERROR_SUBJECT)
SEEN_LIMIT = 10_000


class InterswarmReceiveError(Exception):
    """An envelope this instance cannot accept; `status` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class InterswarmBridge(HostLink["MAILRuntime"]):
    def __init__(
        self, runtime: MAILRuntime, router: InterswarmRouter, owns_router: bool = False
    ) -> None:
        # Weakly: the runtime holds its bridge (see mail.core.runtime_ports.HostLink).
        self._link(runtime)
        self.router = router
        self.owns_router = owns_router
        self._sending: set[asyncio.Task[Any]] = set()
        self._seen: OrderedDict[str, None] = OrderedDict()
        # task_id -> the remote agent (agent@swarm) that brought the task to this instance
        self.remote_callers: dict[str, str] = {}
        # swarm -> task_id -> local senders (agent names, or the user id) waiting on an
        # answer from that swarm; told at once when the swarm is found gone.
        self._waiting: dict[str, dict[str, set[str]]] = {}
        # (swarm, task_id, sender) of sends under way: their own failure is reported by _send.
        self._in_flight: set[tuple[str, str, str]] = set()
        # task_id -> swarms our user or admin sent that task to directly
        # (POST /interswarm/message): only their task-end notice may end it here.
        self._direct: dict[str, set[str]] = {}
        # Swarms this instance's agents discovered (net/discovery.py); None: no discovery.
        self.discovery: DiscoveredSwarms | None = None

    @property
    def runtime(self) -> MAILRuntime:
        return self.host

    @property
    def local_swarm(self) -> str:
        return self.runtime.swarm_name

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.owns_router and not self.router.is_running():
            await self.router.start()
        add = getattr(self.router.swarm_registry, "add_down_listener", None)
        if add is not None:
            add(self.swarm_down)

    async def stop(self) -> None:
        remove = getattr(self.router.swarm_registry, "remove_down_listener", None)
        if remove is not None:
            remove(self.swarm_down)
        await finish(self._sending, 2.0)
        if self.owns_router:
            await self.router.stop()

    def _spawn(self, coro: Any) -> None:
        hold(self._sending, asyncio.create_task(coro))

    # ------------------------------------------------------------------ sending
    def send_soon(self, message: MAILMessage, remote: list[str]) -> None:
        """Send `message` to the swarms named in `remote` (agent@swarm addresses)."""
        by_swarm: dict[str, list[str]] = {}
        for address in remote:
            _, swarm = parse_agent_address(address)
            by_swarm.setdefault(swarm or "", []).append(address)
        for swarm in by_swarm:
            self._spawn(self._send(message, swarm))

    def sends_out(self, task_id: str, calls: list[AgentToolCall]) -> bool:
        """Whether acting on `calls` sends something to another swarm: a message to an agent
        there, an interswarm broadcast, or the end of a task other swarms take part in (the
        runtime keeps such an answer before acting on it, so a re-run after a crash sends
        the same messages under the same ids: `TurnContext.keep_step`)."""
        task = self.runtime.mail_tasks.get(task_id)
        for call in calls:
            name = call.tool_name
            if name == "send_interswarm_broadcast":
                return True
            if name == "task_complete" and task is not None:
                if task.remote_swarms or task_id in self.remote_callers:
                    return True
            target = call.tool_args.get("target")
            if isinstance(target, str) and "@" in target:
                if not self.runtime._is_local_swarm(parse_agent_address(target.strip())[1]):
                    return True
        return False

    def _qualified(self, message: MAILMessage) -> MAILMessage:
        payload: Any = dict(message["message"])
        sender = payload["sender"]
        name, swarm = parse_agent_address(sender["address"])
        if swarm is None and sender["address_type"] == "agent":
            payload["sender"] = create_agent_address(f"{name}@{self.local_swarm}")
        payload["sender_swarm"] = self.local_swarm
        return {**message, "message": payload}

    async def _send(self, message: MAILMessage, target_swarm: str) -> None:
        rt = self.runtime
        payload: Any = message["message"]
        task_id = payload["task_id"]
        task = rt._ensure_task(task_id)
        task.add_contributor(rt.this_owner)
        # Recorded (and persisted) before sending: the remote may answer on /back before
        # our POST returns, and only swarms named here may add to the task (net/trust.py).
        new_peer = target_swarm not in task.remote_swarms
        task.remote_swarms.add(target_swarm)
        rt.observer.task_changed(task)
        direction = self.router.choose_direction(target_swarm, task.task_contributors)
        if payload["sender"]["address_type"] in ("user", "admin"):
            self._note_direct(task_id, target_swarm)
        waiter = self._expect_answer(message, target_swarm)
        flight = (target_swarm, task_id, waiter or "")
        self._in_flight.add(flight)
        try:
            envelope = self.router.wrap_message(
                self._qualified(message), target_swarm, task.task_owner, task.task_contributors
            )
            await self._post(envelope, direction)
        except Exception as exc:  # noqa: BLE001 - any failure must reach the agent
            if not isinstance(exc, InterswarmError | ValueError):
                logger.exception("unexpected interswarm send failure")
            if waiter is not None:
                self._forget_wait(target_swarm, task_id, waiter)
            if new_peer and sum(f[:2] == flight[:2] for f in self._in_flight) == 1:
                # Its first message did not get through: the swarm takes no part in the task, so
                # the task's end is not sent there either (a second failure to report).
                task.remote_swarms.discard(target_swarm)
                rt.observer.task_changed(task)
            self._report_send_failure(message, target_swarm, direction, exc)
            return
        finally:
            self._in_flight.discard(flight)
        rt._emit(
            task_id,
            "interswarm_message_sent",
            lambda: (
                f"sent interswarm message {direction} to swarm {target_swarm}:\n"
                f"{build_interswarm_mail_xml(envelope)}"
            ),
        )

    def _report_send_failure(
        self, message: MAILMessage, target_swarm: str, direction: str, exc: Exception
    ) -> None:
        rt = self.runtime
        payload: Any = message["message"]
        task_id = payload["task_id"]
        rt._emit(
            task_id,
            "interswarm_message_error",
            f"error sending interswarm message {direction}: {exc}",
            {"target_swarm": target_swarm},  # the peer, for push notifications
        )
        sender = payload["sender"]
        name, swarm = parse_agent_address(sender["address"])
        text = f"Your message to swarm '{target_swarm}' could not be delivered: {exc}"
        if (
            sender["address_type"] == "agent"
            and name in rt.agents
            and swarm in (None, self.local_swarm)
        ):
            rt.mailbox.put(
                system_response(rt.swarm_name, task_id, name, "::interswarm_error::", text)
            )
        elif sender["address_type"] in ("user", "admin"):
            # A caller's direct interswarm message: nobody here can retry, so answer now.
            answer = system_task_end(rt.swarm_name, task_id, "::interswarm_error::", text)
            if isinstance(exc, InterswarmError) and exc.status == 400:
                # The peer refused what the caller wrote (e.g. a non-entrypoint target):
                # POST /interswarm/message turns this answer into its own 400.
                answer["message"]["routing_info"] = {"peer_status": 400}
            rt._complete_task(task_id, answer)

    async def _post(self, envelope: MAILInterswarmMessage, direction: Any) -> None:
        """Send through the router, or to a swarm only this instance discovered."""
        target = envelope["target_swarm"]
        found = self.discovery.get(target) if self.discovery is not None else None
        if found is None or self.discovery is None:
            await self.router.send_interswarm(envelope, direction)
            return
        await self.discovery.send(found, envelope, direction, self.router.request_timeout)

    # ------------------------------------------------------------------ dead peers
    def _expect_answer(self, message: MAILMessage, target_swarm: str) -> str | None:
        """Note that the sender of `message` now waits on `target_swarm`; its key or None."""
        if message["msg_type"] == "response":
            return None
        payload: Any = message["message"]
        sender = payload["sender"]
        name, swarm = parse_agent_address(sender["address"])
        if sender["address_type"] == "agent" and swarm not in (None, self.local_swarm):
            return None
        if sender["address_type"] not in ("agent", "user", "admin"):
            return None
        tasks = self._waiting.setdefault(target_swarm, {})
        for task_id in [t for t in tasks if self._task_done(t)]:
            del tasks[task_id]
        tasks.setdefault(payload["task_id"], set()).add(name)
        return name

    def _note_direct(self, task_id: str, target_swarm: str) -> None:
        for done in [t for t in self._direct if self._task_done(t)]:
            del self._direct[done]
        self._direct.setdefault(task_id, set()).add(target_swarm)

    def is_waiting(self, task_id: str, name: str) -> bool:
        """Does `name` (a local agent) wait on an answer from another swarm in this task?"""
        return any(name in tasks.get(task_id, ()) for tasks in self._waiting.values())

    def _task_done(self, task_id: str) -> bool:
        task = self.runtime.mail_tasks.get(task_id)
        return task is None or task.completed

    def _forget_wait(self, swarm: str, task_id: str, waiter: str) -> bool:
        """Drop one wait; whether it was still there."""
        waiters = self._waiting.get(swarm, {}).get(task_id)
        if not waiters or waiter not in waiters:
            return False
        waiters.discard(waiter)
        if not waiters:
            del self._waiting[swarm][task_id]
        return True

    def swarm_down(self, swarm: str, reason: str) -> None:
        """`swarm` was found unreachable: everyone here waiting on it hears so now."""
        rt = self._host_ref()
        if rt is None:  # its swarm was let go of without a shutdown: stop listening
            remove = getattr(self.router.swarm_registry, "remove_down_listener", None)
            if remove is not None:
                remove(self.swarm_down)
            return
        for task_id, all_waiters in self._waiting.pop(swarm, {}).items():
            task = rt.mail_tasks.get(task_id)
            if task is None or task.completed:
                continue
            # A send still under way reports its own failure (with its own reason).
            busy = {w for w in all_waiters if (swarm, task_id, w) in self._in_flight}
            if busy:
                self._waiting.setdefault(swarm, {})[task_id] = busy
            waiters = all_waiters - busy
            if not waiters:
                continue
            text = (
                f"Swarm '{swarm}' became unreachable while this task waited on it "
                f"({reason}); no answer will come from it."
            )
            rt._emit(task_id, "interswarm_message_error", text, {"target_swarm": swarm})
            for waiter in sorted(waiters):
                if waiter in rt.agents:
                    rt.mailbox.put(
                        system_response(
                            rt.swarm_name, task_id, waiter, "::interswarm_error::", text
                        )
                    )
                else:
                    # The caller's own message (POST /interswarm/message): nobody can retry.
                    rt._complete_task(
                        task_id,
                        system_task_end(rt.swarm_name, task_id, "::interswarm_error::", text),
                    )
                    break

    # ------------------------------------------------------------------ completion
    def task_failed(self, task_id: str, response: MAILMessage) -> None:
        """A task ended without task_complete: tell the other swarms, as for a completion."""
        self.task_completed(task_id, response, subject=TASK_ERROR_SUBJECT)

    def task_completed(
        self, task_id: str, response: MAILMessage, subject: str = TASK_COMPLETE_SUBJECT
    ) -> None:
        rt = self.runtime
        task = rt.mail_tasks.get(task_id)
        if task is None:
            return
        sender = response["message"]["sender"]
        caller = sender["address"] if sender["address_type"] == "agent" else rt.entrypoint
        if task.task_owner == rt.this_owner:
            # We own the task: tell every contributing remote swarm it is over.
            for swarm in sorted(task.remote_swarms):
                self._notify_end(
                    task_id, caller, f"{rt.entrypoint}@{swarm}", swarm, subject, response
                )
            return
        # A remote task finished here: return the finish message to the agent that asked.
        target = self.remote_callers.get(task_id)
        if not target:
            return
        _, target_swarm = parse_agent_address(target)
        self._notify_end(task_id, caller, target, target_swarm, subject, response)

    def _notify_end(
        self,
        task_id: str,
        caller: str,
        recipient: str,
        swarm: str | None,
        subject: str,
        response: MAILMessage,
    ) -> None:
        """Send the task-end notice (`subject`, the finish text of `response`, the task's
        answer) to `recipient` in `swarm`. Its id derives from the answer's: sent again by
        a re-run of the step that ended the task, it is the same message to the peer."""
        notice = make_message(
            make_request(
                task_id,
                create_agent_address(f"{caller}@{self.local_swarm}"),
                create_agent_address(recipient),
                subject,
                response["message"]["body"],
                sender_swarm=self.local_swarm,
                recipient_swarm=swarm,
                routing_info={"origin_swarm": self.local_swarm, "remote_swarm": swarm},
                request_id=str(uuid.uuid5(_NOTICE_IDS, f"request {response['id']}|{recipient}")),
            ),
            "response",
            message_id=str(uuid.uuid5(_NOTICE_IDS, f"{response['id']}|{recipient}")),
        )
        self._spawn(self._send_notice(notice, swarm or ""))

    async def _send_notice(self, notice: MAILMessage, swarm: str) -> None:
        rt = self.runtime
        task = rt.mail_tasks[notice["message"]["task_id"]]
        direction = self.router.choose_direction(swarm, task.task_contributors)
        try:
            envelope = self.router.wrap_message(
                notice, swarm, task.task_owner, task.task_contributors
            )
            await self._post(envelope, direction)
        except Exception as exc:  # noqa: BLE001 - a lost notice is logged, never fatal
            rt._emit(
                task.task_id,
                "interswarm_message_error",
                f"error sending interswarm message {direction}: {exc}",
                {"target_swarm": swarm},
            )
            logger.warning("could not notify swarm %s of task %s: %s", swarm, task.task_id, exc)

    # ------------------------------------------------------------------ receiving
    def receive(self, envelope: MAILInterswarmMessage, direction: str) -> str:
        """Feed an incoming envelope into the runtime; returns the task id."""
        rt = self.runtime
        if envelope["target_swarm"] != self.local_swarm:
            raise InterswarmReceiveError(
                f"received interswarm message for wrong swarm: '{envelope['target_swarm']}'"
            )
        payload: Any = envelope["payload"]
        task_id = payload["task_id"]
        message_id = envelope["message_id"]
        if message_id in self._seen:
            return task_id
        owner = envelope["task_owner"]
        contributors = list(envelope["task_contributors"])
        for contributor in [owner, *contributors]:
            try:
                parse_task_contributor(contributor)
            except ValueError as exc:
                raise InterswarmReceiveError(str(exc)) from exc
        source = envelope["source_swarm"]
        task = rt.mail_tasks.get(task_id)
        try:
            if task is None:
                if direction == "back":
                    raise TrustError(f"task '{task_id}' is not known to this swarm", 404)
                check_new_task(
                    local_swarm=self.local_swarm,
                    source_swarm=source,
                    task_id=task_id,
                    task_owner=owner,
                )
            else:
                check_existing_task(
                    source_swarm=source,
                    task_id=task_id,
                    task_owner=task.task_owner,
                    forwarded_to=task.remote_swarms,
                )
                if task.task_owner != owner:
                    # Another caller's task under the same id: the peer is told so without
                    # their name (it goes back to the sender); the operator's log has both.
                    logger.info(
                        "refused interswarm %s from swarm '%s': task %s is owned by %s, not %s",
                        direction,
                        source,
                        task_id,
                        task.task_owner,
                        owner,
                    )
                    raise InterswarmReceiveError(
                        f"task '{task_id}' here belongs to someone else: use another task id",
                        409,
                    )
            sender = peer_sender(payload["sender"], source_swarm=source, task_owner=owner)
            check_subject(payload.get("subject"), source_swarm=source)
            ends_task = False
            if payload.get("subject") in TASK_END_SUBJECTS:
                direct = source in self._direct.get(task_id, ())
                ends_task = task_end(rt, payload, source, owner, direct) == "end"
        except TrustError as exc:
            logger.warning("refused interswarm %s from swarm '%s': %s", direction, source, exc)
            raise InterswarmReceiveError(str(exc), exc.status) from exc
        if task is not None and already_received(rt.journal, task, message_id):
            self._remember(message_id)  # (delivered before a restart: not a second time)
            return task_id
        problem = swarm_target_problem(rt, payload) or user_target_problem(rt, payload)
        if problem is not None:
            logger.info("refused interswarm %s from swarm '%s': %s", direction, source, problem)
            raise InterswarmReceiveError(problem, 400)
        # From here on the peer's message carries its re-attributed sender (net/trust.py).
        payload = {**payload, "sender": sender, "sender_swarm": source}
        incoming = as_message({**envelope, "payload": payload})  # type: ignore[typeddict-item]
        # A peer names its own side's contributors; who takes part on this side is ours to
        # record (a peer listing `user:someone@<this swarm>` does not make them one).
        contributors = [c for c in contributors if parse_task_contributor(c)[2] != self.local_swarm]
        if task is None:
            task = rt._ensure_task(task_id, owner, contributors)
        for contributor in contributors:
            task.add_contributor(contributor)
        task.add_contributor(rt.this_owner)
        self._remember(message_id)
        waiting = self._waiting.get(source)
        if waiting is not None:
            waiting.pop(task_id, None)
        rt._emit(
            task_id,
            "interswarm_message_received",
            f"received interswarm message from swarm {source}",
        )
        if ends_task:
            if not task.completed:
                rt._complete_task(task_id, incoming)
            return task_id
        if owner != rt.this_owner and task_id not in self.remote_callers:
            self.remote_callers[task_id] = sender["address"]
        self._count_answer(incoming)
        if task.completed:
            rt._resume_task(task_id)
        rt.submit(incoming)
        task.wake()
        return task_id

    def receive_progress(
        self, task_id: str, source_swarm: str, description: str, extra: dict[str, Any]
    ) -> bool:
        """A peer's update on work it does for one of our tasks (an A2A agent's status or
        artifact update while the call runs): an `interswarm_message_progress` event, taken
        only from a swarm the task was sent to and while the task runs; whether it was."""
        task = self.runtime.mail_tasks.get(task_id)
        if task is None or task.completed or source_swarm not in task.remote_swarms:
            return False
        self.runtime._emit(
            task_id, "interswarm_message_progress", description, {**extra, "swarm": source_swarm}
        )
        return True

    def _count_answer(self, message: MAILMessage) -> None:
        """A peer's response settles one outstanding request of the local agent it answers
        (as a local send_response does), so `await_message` sees the true count."""
        if message["msg_type"] != "response":
            return
        payload: Any = message["message"]
        recipient = payload.get("recipient")
        if not isinstance(recipient, dict):
            return
        name, swarm = parse_agent_address(str(recipient.get("address", "")))
        outstanding = self.runtime.outstanding_requests.get(payload["task_id"], {})
        if self.runtime._is_local_swarm(swarm) and outstanding.get(name, 0) > 0:
            outstanding[name] -= 1

    def _remember(self, message_id: str) -> None:
        self._seen[message_id] = None
        if len(self._seen) > SEEN_LIMIT:
            self._seen.popitem(last=False)

    # ------------------------------------------------------------------ supervisor tools
    async def broadcast_tool(self, ctx: TurnContext, call: AgentToolCall) -> str:
        rt = self.runtime
        args = call.tool_args
        requested = args.get("target_swarms") or []
        if isinstance(requested, str):
            # One swarm named as a string, not a list: iterating it would name each letter.
            requested = [requested]
        if not isinstance(requested, list) or not all(isinstance(s, str) for s in requested):
            return "ERROR: target_swarms must be a list of swarm names"
        swarms = [s for s in requested if s]
        if not swarms:
            active = self.router.swarm_registry.get_active_endpoints()
            swarms = [name for name in active if name != self.local_swarm]
        if not swarms:
            return "ERROR: no remote swarms are known to broadcast to"
        payload = make_broadcast(
            ctx.task_id,
            create_agent_address(ctx.agent_name),
            [create_agent_address(f"all@{s}") for s in swarms],
            str(args.get("subject", "")),
            str(args.get("body", "")),
            recipient_swarms=swarms,
            broadcast_id=ctx.sent_id(call, "broadcast"),
        )
        message = make_message(payload, "broadcast", message_id=ctx.sent_id(call))
        for swarm in swarms:
            rt._ensure_task(ctx.task_id).remote_swarms.add(swarm)
            self._spawn(self._send(message, swarm))
        return f"SUCCESS: broadcast sent to {', '.join(swarms)}"

    async def discover_tool(self, ctx: TurnContext, call: AgentToolCall) -> str:
        """Discovery for this instance only (net/discovery.py); never the server registry."""
        if self.discovery is None:
            return "ERROR: swarm discovery is not available on this server"
        try:
            return await self.discovery.discover(call.tool_args.get("discovery_urls"))
        except Exception as exc:  # noqa: BLE001 - reported to the agent
            logger.exception("discovery failed")
            return f"ERROR: discovery failed: {exc}"
