"""Delivery: from a dequeued message to agent turns (routing, comm_targets, step limit)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from mail.core.message import (
    ALL_AGENTS,
    MAILMessage,
    build_mail_xml,
    message_recipients,
    parse_agent_address,
)
from mail.core.system_messages import (
    improper_response_to_user_body,
    invalid_recipient_body,
    max_steps_body,
    swarm_name_recipient_body,
    system_response,
    system_task_end,
    unknown_agent_body,
)

if TYPE_CHECKING:
    from mail.core.runtime import MAILRuntime

logger = logging.getLogger("mail.runtime")

MAX_STEPS_SUBJECT = "::maximum_steps_reached::"
ACTION_COMPLETE_BROADCAST = "::action_complete_broadcast::"


def _is_step_notice(extra_data: dict[str, Any]) -> bool:
    message = extra_data.get("full_message")
    return isinstance(message, dict) and message["message"].get("subject") == MAX_STEPS_SUBJECT


class DeliveryMixin:
    """Routing of one message to its recipients (mixed into MAILRuntime)."""

    # ------------------------------------------------------------------ step limit
    def _apply_step_limit(self: MAILRuntime, message: MAILMessage) -> MAILMessage:
        payload = message["message"]
        if payload["subject"].startswith("::") or payload["sender"]["address_type"] == "system":
            return message
        task_id = payload["task_id"]
        steps = self._step_counts.get(task_id, 0) + 1
        self._step_counts[task_id] = steps
        limit = self._step_limits.get(task_id, self.max_steps)
        if limit is None or steps <= limit:
            return message
        return system_response(
            self.swarm_name,
            task_id,
            self.entrypoint,
            MAX_STEPS_SUBJECT,
            max_steps_body(self._transcript(task_id)),
        )

    def _transcript(self: MAILRuntime, task_id: str) -> str:
        task = self.mail_tasks.get(task_id)
        if task is None:
            return ""
        blocks: list[str] = []
        for event in task.events:
            if event.event == "new_message" and _is_step_notice(event.extra_data):
                # An earlier notice carries its own transcript: repeating it would double
                # the text with every message over the limit (a fan-out of 50 past the
                # limit would never finish).
                continue
            description = event.description
            if ACTION_COMPLETE_BROADCAST in description:
                continue
            name = "action_output" if event.event == "action_complete" else event.event
            record = json.dumps({"event": name, "description": description}, indent=2)
            blocks.append(f"--- Event {len(blocks) + 1} ---\n{record}")
        return "\n\n".join(blocks)

    # ------------------------------------------------------------------ routing
    def _is_local_swarm(self: MAILRuntime, swarm: str | None) -> bool:
        return swarm is None or swarm == "" or swarm == self.swarm_name

    def _sender_is_local_agent(self: MAILRuntime, payload: Any) -> bool:
        return self._local_sender(payload) is not None

    def _local_sender(self: MAILRuntime, payload: Any) -> str | None:
        """The sender's name when it is an agent of THIS swarm, else None.

        Agents of different swarms may share a name (every swarm's entrypoint is usually
        `supervisor`): `supervisor@alpha` is not our `supervisor`, so a name alone never
        identifies the sender; its swarm (address or `sender_swarm`) must be ours too.
        """
        if payload["sender"]["address_type"] != "agent":
            return None
        name, swarm = parse_agent_address(payload["sender"]["address"])
        if not self._is_local_swarm(swarm) or not self._is_local_swarm(payload.get("sender_swarm")):
            return None
        return name

    def _from_peer(self: MAILRuntime, payload: Any) -> bool:
        """Did this message arrive from another swarm (its sender names a remote swarm)?"""
        _, swarm = parse_agent_address(payload["sender"]["address"])
        return not self._is_local_swarm(swarm) or not self._is_local_swarm(
            payload.get("sender_swarm")
        )

    def disallowed_targets(self: MAILRuntime, sender: str, targets: list[str]) -> list[str]:
        """Targets that `sender`'s comm_targets do not allow (`all` is always allowed)."""
        agent = self.agents.get(sender)
        if agent is None:
            return []
        # Compared as full addresses: `x@<this swarm>` is `x`; `x@other` is never `x`.
        allowed = {self._full_address(t) for t in agent.comm_targets}
        return [t for t in targets if t != ALL_AGENTS and self._full_address(t) not in allowed]

    def _full_address(self: MAILRuntime, address: str) -> str:
        name, swarm = parse_agent_address(address)
        return f"{name}@{self.swarm_name if self._is_local_swarm(swarm) else swarm}"

    def _process_message(self: MAILRuntime, message: MAILMessage) -> None:
        payload: Any = message["message"]
        task_id = payload["task_id"]
        task = self._ensure_task(task_id)
        sender = payload["sender"]
        sender_type = sender["address_type"]
        if task.completed and message["msg_type"] != "broadcast_complete":
            if sender_type == "agent":
                logger.debug("dropping agent message for completed task %s", task_id)
                return
            if sender_type == "system":
                # A late runtime notice (from a turn still in flight when the task ended):
                # keep it with the task's stashed queue; a continuation delivers it.
                task.queue_stash([{"priority": 1, "seq": 0, "message": message}])
                self.observer.queue_stashed(task_id, list(task.task_message_queue))
                return

        names = [r["address"] for r in message_recipients(message)]
        # Compared by full address: a same-named agent of another swarm is someone else.
        local_sender = self._local_sender(payload)
        prechecked = message["id"] in self._prechecked
        if prechecked:
            self._prechecked.discard(message["id"])
        if (
            not prechecked
            and message["msg_type"] not in ("broadcast", "broadcast_complete")
            and local_sender is not None
        ):
            disallowed = self.disallowed_targets(local_sender, names)
            if disallowed:
                self._emit(
                    task_id,
                    "agent_error",
                    f"agent attempted to contact disallowed recipients: {disallowed}",
                )
                targets = self.agents[local_sender].comm_targets
                self.mailbox.put(
                    system_response(
                        self.swarm_name,
                        task_id,
                        local_sender,
                        "::invalid_recipient::",
                        invalid_recipient_body(disallowed, targets),
                    )
                )
                return

        local: list[str] = []
        remote: list[str] = []
        for name in names:
            if "@" not in name:  # the common case: a plain local name
                local.append(name.strip())
                continue
            agent_name, swarm = parse_agent_address(name)
            if self._is_local_swarm(swarm):
                local.append(agent_name)
            else:
                remote.append(name)
        if remote and self._from_peer(payload):
            # A peer's envelope is delivered here only (a broadcast to several swarms names
            # the others too, and each gets its own copy): never relayed under its name.
            logger.debug("not relaying %s's message to %s", sender["address"], remote)
        elif remote:
            self._route_remote(message, remote)
        if local:
            self._deliver_local(message, local, local_sender)

    def _route_remote(self: MAILRuntime, message: MAILMessage, remote: list[str]) -> None:
        payload: Any = message["message"]
        task_id = payload["task_id"]
        if self.enable_interswarm and self.interswarm is not None:
            self.interswarm.send_soon(message, remote)
            return
        local_sender = self._local_sender(payload)
        sender_name = local_sender or payload["sender"]["address"]
        self._emit(
            task_id,
            "agent_error",
            f"interswarm is not enabled; message from {sender_name} to {', '.join(remote)} "
            "cannot be delivered",
        )
        if local_sender is not None and local_sender in self.agents:
            self.mailbox.put(
                system_response(
                    self.swarm_name,
                    task_id,
                    sender_name,
                    "::agent_error::",
                    f"Messages to other swarms ({', '.join(remote)}) are not possible: "
                    "interswarm messaging is disabled for this swarm.",
                )
            )

    def _deliver_local(
        self: MAILRuntime, message: MAILMessage, names: list[str], local_sender: str | None
    ) -> None:
        """Deliver to this swarm's agents `names`; `local_sender` is the sending agent's name
        when it is one of ours (never itself a recipient), None for anyone else (a user, the
        system, an agent of another swarm, whatever its name)."""
        payload: Any = message["message"]
        task_id = payload["task_id"]
        sender_name = payload["sender"]["address"] if local_sender is None else local_sender
        expanded: list[str]
        if len(names) == 1 and names[0] != ALL_AGENTS:
            expanded = [] if names[0] == local_sender else names
        else:
            expanded = []
            seen: set[str] = set()
            for name in names:
                for target in self.agents if name == ALL_AGENTS else (name,):
                    if target not in seen and target != local_sender:
                        seen.add(target)
                        expanded.append(target)

        sender_type = payload["sender"]["address_type"]
        for name in expanded:
            if name in self.agents:
                self._deliver_to_agent(task_id, name, message)
            elif name == self.user_id:
                self._emit(
                    task_id,
                    "agent_error",
                    f"agent {sender_name} attempted to send a message to the user ({self.user_id})",
                )
                if local_sender is not None and local_sender in self.agents:
                    self.mailbox.put(
                        system_response(
                            self.swarm_name,
                            task_id,
                            local_sender,
                            "::improper_response_to_user::",
                            improper_response_to_user_body(self.user_id),
                        )
                    )
            elif name == self.swarm_name:
                self._emit(
                    task_id,
                    "task_error",
                    f"agent {name} is the swarm name; message from {sender_name} cannot be "
                    "delivered to it",
                )
                self.mailbox.put(
                    system_task_end(
                        self.swarm_name,
                        task_id,
                        "::runtime_error::",
                        swarm_name_recipient_body(name),
                    )
                )
                return
            else:
                self._emit(
                    task_id,
                    "agent_error",
                    f"agent {name} is unknown; message from {sender_name} cannot be delivered to it",
                )
                if local_sender is not None and local_sender in self.agents:
                    targets = self.agents[local_sender].comm_targets
                    self.mailbox.put(
                        system_response(
                            self.swarm_name,
                            task_id,
                            local_sender,
                            "::agent_error::",
                            unknown_agent_body(name, targets),
                        )
                    )
                elif sender_type in ("user", "admin"):
                    # Nobody in the swarm will ever see this message: end the task clearly
                    # instead of leaving the caller waiting.
                    self.mailbox.put(
                        system_task_end(
                            self.swarm_name,
                            task_id,
                            "::agent_error::",
                            f"There is no agent called '{name}' in swarm '{self.swarm_name}'.",
                        )
                    )

    def _deliver_to_agent(self: MAILRuntime, task_id: str, name: str, message: MAILMessage) -> None:
        payload: Any = message["message"]
        if self.mode == "manual" and payload["sender"]["address_type"] != "system":
            self.manual_message_buffer.setdefault(f"{task_id}::{name}", []).append(message)
            return
        if not payload["subject"].startswith(ACTION_COMPLETE_BROADCAST):
            self._emit(
                task_id,
                "new_message",
                lambda: f"sending message:\n{build_mail_xml(message)['content']}",
                {"full_message": message},
            )
        # The turn takes what waits in the agent's inbox when it starts (see runtime_batching).
        if self.inboxes.add(f"{task_id}::{name}", message):
            self._spawn(task_id, self._run_turn(task_id, name, None, None))

    def _tool_choice_for(self: MAILRuntime, messages: list[MAILMessage]) -> Any:
        """What the agent must do this turn: anything, a tool, or task_complete."""
        if self.mode == "manual":
            return "auto"
        if any(m["message"]["subject"] == MAX_STEPS_SUBJECT for m in messages):
            return {"type": "function", "name": "task_complete"}
        return "required"
