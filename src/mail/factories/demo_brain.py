"""Decision logic of the offline demo model (`mail/demo`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from mail.core.review import REJECTED_PREFIX
from mail.core.team.service import DIGEST_PREFIX
from mail.core.team.tool_specs import TEAM_TOOL_NAMES
from mail.core.tools import RUNTIME_TOOL_NAMES
from mail.factories.demo_team import TEAM_MARKERS, lead_turn, teammate_turn
from mail.factories.demo_text import (
    Incoming,
    deterministic_pick,
    fill_arguments,
    fit_score,
    message_blocks,
    parse_incoming,
    summarize,
)


@dataclass
class DemoTurn:
    text: str | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class _Tool:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class _State:
    """What the conversation so far implies (rebuilt from history on every turn)."""

    current: Incoming | None = None
    origin: Incoming | None = None
    current_is_reply: bool = False
    outstanding: dict[str, int] = field(default_factory=dict)
    replies: list[Incoming] = field(default_factory=list)
    last_action_results: list[str] = field(default_factory=list)
    ends_with_tool_results: bool = False
    # names and arguments of the last batch's actions (for reviewed drafts, below)
    last_action_names: list[str] = field(default_factory=list)
    last_action_args: list[dict[str, Any]] = field(default_factory=list)


def _tools_by_name(tools: list[dict[str, Any]]) -> dict[str, _Tool]:
    result = {}
    for tool in tools or []:
        spec = tool.get("function", tool)
        name = spec.get("name")
        if name:
            result[name] = _Tool(name, spec.get("description") or "", spec.get("parameters") or {})
    return result


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _rebuild_state(messages: list[dict[str, Any]]) -> _State:
    state = _State()
    action_ids: set[str] = set()
    for message in messages:
        role = message.get("role")
        if role == "user":
            incoming = parse_incoming(_text(message.get("content")))
            state.current = incoming
            state.ends_with_tool_results = False
            is_reply = (
                not incoming.manual
                and incoming.sender_type == "agent"
                and state.outstanding.get(incoming.sender, 0) > 0
            )
            state.current_is_reply = is_reply
            if is_reply:
                state.outstanding[incoming.sender] -= 1
                state.replies.append(incoming)
            elif incoming.manual or incoming.sender_type != "system":
                state.origin = incoming
                state.outstanding = {}
                state.replies = []
        elif role == "assistant":
            batch_actions = False
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                name = function.get("name", "")
                if name == "send_request":
                    target = _arguments(function).get("target", "")
                    state.outstanding[target] = state.outstanding.get(target, 0) + 1
                elif name not in RUNTIME_TOOL_NAMES:
                    if not batch_actions:
                        state.last_action_results = []
                        state.last_action_names = []
                        state.last_action_args = []
                        action_ids.clear()
                        batch_actions = True
                    action_ids.add(call.get("id", ""))
                    state.last_action_names.append(name)
                    state.last_action_args.append(_arguments(function))
        elif role == "tool":
            state.ends_with_tool_results = True
            if message.get("tool_call_id") in action_ids:
                state.last_action_results.append(_text(message.get("content")))
    return state


def _arguments(function: dict[str, Any]) -> dict[str, Any]:
    raw = function.get("arguments")
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _targets(tools: dict[str, _Tool]) -> list[str]:
    tool = tools.get("send_request")
    if tool is None:
        return []
    target = (tool.parameters.get("properties") or {}).get("target") or {}
    if target.get("enum"):
        return list(target["enum"])
    description = target.get("description", "")
    if "Must be one of:" in description:
        listed = description.split("Must be one of:", 1)[1]
        return [t.strip(" .") for t in listed.split(",") if t.strip(" .")]
    return []


def _target_descriptions(system: str, targets: list[str]) -> dict[str, str]:
    """Lines of the system prompt that talk about each target (its 'description')."""
    lines = [line for line in system.splitlines() if "Name:" not in line]

    def mentions(line: str) -> set[str]:
        return {t for t in targets if t.lower() in line.lower()}

    # Only lines about one target describe it; a line naming several says nothing specific.
    return {t: " ".join(line for line in lines if mentions(line) == {t}) for t in targets}


def _clean_result(result: str) -> str:
    return result.removeprefix("SUCCESS: ")


class DemoBrain:
    """Decides one turn. Construct per call; `decide()` is pure."""

    def __init__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: Any
    ) -> None:
        self.messages = messages
        self.tools = _tools_by_name(tools)
        self.tool_choice = tool_choice
        self.system = "".join(
            _text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
        )
        self.state = _rebuild_state(messages)
        self.actions = [
            t
            for name, t in self.tools.items()
            if name not in RUNTIME_TOOL_NAMES and name not in TEAM_TOOL_NAMES
        ]

    # -- helpers -----------------------------------------------------------------------------

    def has(self, name: str) -> bool:
        return name in self.tools

    def _finish_or_reply(self, answer: str, origin: Incoming | None) -> DemoTurn:
        """Deliver `answer` to whoever asked: the user via task_complete, an agent by reply."""
        if origin is not None and origin.manual:
            return DemoTurn(text=answer)
        if origin is not None and origin.sender_type == "agent" and self.has("send_response"):
            subject = (
                origin.subject if origin.subject.startswith("Re:") else f"Re: {origin.subject}"
            )
            return DemoTurn(
                calls=[
                    ("send_response", {"target": origin.sender, "subject": subject, "body": answer})
                ]
            )
        if self.has("task_complete"):
            return DemoTurn(calls=[("task_complete", {"finish_message": answer})])
        if self.tool_choice == "required" and self.has("await_message"):
            return DemoTurn(calls=[("await_message", {"reason": "nothing more to do"})])
        return DemoTurn(text=answer)

    def _canned_answer(self, request: Incoming) -> str:
        first_line = self.system.strip().splitlines()[0] if self.system.strip() else ""
        persona = first_line.replace("You are ", "I am ", 1) if first_line else "I am a demo agent."
        return (
            f"[demo model] {summarize(persona, 100)} I have no specialist or action for "
            f"'{summarize(request.body, 120)}', and the offline demo model cannot write real "
            "answers; switch the swarm to a real model for that."
        )

    def _best_action(self, request: str) -> tuple[_Tool | None, int]:
        best: tuple[_Tool | None, int] = (None, 0)
        for tool in self.actions:
            score = fit_score(request, tool.name, tool.description)
            if score > best[1]:
                best = (tool, score)
        return best

    # -- decisions ---------------------------------------------------------------------------

    def decide(self) -> DemoTurn:
        turn = self._decide()
        if self.tool_choice == "required" and not turn.calls:
            # The runtime demands a tool call; park the agent rather than answer in text.
            if self.has("await_message"):
                return DemoTurn(calls=[("await_message", {"reason": "nothing to add"})])
            if self.has("task_complete"):
                return DemoTurn(calls=[("task_complete", {"finish_message": turn.text or ""})])
        return turn

    def _decide(self) -> DemoTurn:
        forced = self.tool_choice
        if isinstance(forced, dict):
            name = forced.get("name") or (forced.get("function") or {}).get("name")
            if name == "task_complete":
                return DemoTurn(calls=[("task_complete", {"finish_message": self._summary()})])
        state = self.state
        current = state.current
        if current is None:
            return self._finish_or_reply("[demo model] Nothing to respond to.", None)
        if state.ends_with_tool_results or current.subject in (
            "::action_complete::",
            "::action_error::",
        ):
            return self._after_actions()
        if current.manual:
            return self._manual_step(current)
        if current.sender_type == "system":
            return self._system_notice(current)
        if state.current_is_reply:
            return self._after_reply()
        if current.to_all and current.sender_type == "agent":
            if self.has("acknowledge_broadcast"):
                return DemoTurn(calls=[("acknowledge_broadcast", {"note": None})])
            return DemoTurn(text="[demo model] noted.")
        return self._new_request(current)

    def _summary(self) -> str:
        if self.state.replies:
            return "\n".join(r.body for r in self.state.replies)
        if self.state.last_action_results:
            return "\n".join(_clean_result(r) for r in self.state.last_action_results)
        return "[demo model] The task ended before an answer was found."

    def _after_actions(self) -> DemoTurn:
        state = self.state
        follow = after_review(
            self.actions,
            state.last_action_names,
            state.last_action_args,
            state.last_action_results,
            state.origin,
        )
        if follow is not None:
            return DemoTurn(calls=[follow])
        results = [_clean_result(r) for r in self.state.last_action_results] or ["(no result)"]
        origin = self.state.origin
        if origin is not None and origin.manual:
            return DemoTurn(text="Done. " + " | ".join(results))
        return self._finish_or_reply("\n".join(results), origin)

    def _after_reply(self) -> DemoTurn:
        waiting = [t for t, n in self.state.outstanding.items() if n > 0]
        if waiting and self.has("await_message"):
            return DemoTurn(
                calls=[("await_message", {"reason": f"waiting for {', '.join(waiting)}"})]
            )
        answer = "\n\n".join(
            f"{r.sender}: {r.body}" if len(self.state.replies) > 1 else r.body
            for r in self.state.replies
        )
        return self._finish_or_reply(answer, self.state.origin)

    def _system_notice(self, notice: Incoming) -> DemoTurn:
        if notice.subject == "::maximum_steps_reached::":
            return self._finish_or_reply(self._summary(), None)
        if notice.subject == "::help::" and self.has("acknowledge_broadcast"):
            return DemoTurn(calls=[("acknowledge_broadcast", {"note": "read the help"})])
        problem = f"[demo model] I could not finish: {notice.subject} {summarize(notice.body, 200)}"
        return self._finish_or_reply(problem, self.state.origin)

    def _new_request(self, request: Incoming) -> DemoTurn:
        drafted = new_request(self.actions, request)
        if drafted is not None:
            return DemoTurn(calls=[drafted])
        text = f"{request.subject} {request.body}"
        action, action_score = self._best_action(text)
        coordinator = self.has("task_complete") and self.has("send_request")
        if action is not None and (not coordinator or action_score >= 2):
            return DemoTurn(calls=[(action.name, fill_arguments(action.parameters, request.body))])
        if coordinator:
            targets = [t for t in _targets(self.tools) if t != request.sender]
            descriptions = _target_descriptions(self.system, targets)
            scored = [(fit_score(text, t, descriptions[t]), t) for t in targets]
            chosen = [t for score, t in sorted(scored, key=lambda p: -p[0]) if score > 0]
            if chosen:
                subject = request.subject or "Request"
                return DemoTurn(
                    calls=[
                        ("send_request", {"target": t, "subject": subject, "body": request.body})
                        for t in chosen
                    ]
                )
        if action is not None and not coordinator:
            return DemoTurn(calls=[(action.name, fill_arguments(action.parameters, request.body))])
        return self._finish_or_reply(self._canned_answer(request), request)

    def _manual_step(self, prompt: Incoming) -> DemoTurn:
        named = [t for t in self.actions if t.name in prompt.body]
        if named:
            action = named[0]
            blocks = message_blocks(prompt.body)
            private = [b for b in blocks if b[0] == "private"]
            relevant = [b for b in (private or blocks) if any(ch.isdigit() for ch in b[2])]
            if relevant:
                return DemoTurn(
                    calls=[
                        (action.name, fill_arguments(action.parameters, body, sender=sender))
                        for _, sender, body in relevant
                    ]
                )
            return DemoTurn(calls=[(action.name, fill_arguments(action.parameters, prompt.body))])
        return DemoTurn(text=self._manual_text(prompt.body))

    def _manual_text(self, prompt: str) -> str:
        """Plain-text answer to a manual-step prompt (buffered messages + instructions)."""
        instructions = prompt.split("</public_message>")[-1].split("</private_message>")[-1]
        template = _REPLY_TEMPLATE.search(instructions)
        if template:
            # "Reply with: I guess <number>." -> fill the placeholder deterministically.
            bounds = re.search(r"between (\d+) and (\d+)", instructions)
            low, high = (int(bounds.group(1)), int(bounds.group(2))) if bounds else (1, 10)
            number = deterministic_pick(low, high, self.system, instructions)
            return template.group(1).replace("<number>", str(number)).strip()
        lines = [line.strip() for line in instructions.splitlines() if line.strip()]
        if not lines:
            return "[demo model] (nothing to say)"
        last = lines[-1]
        if last.split(" ", 1)[0].lower() in _SMALL_TALK_VERBS:
            # An open-ended request to talk: a canned, deterministic line.
            return _SMALL_TALK[deterministic_pick(0, len(_SMALL_TALK) - 1, self.system, prompt)]
        return summarize(last, 300)


_REPLY_TEMPLATE = re.compile(r"[Rr]eply with(?: exactly)?:\s*(.*?<number>\.?)")
_SMALL_TALK_VERBS = frozenset(
    "say tell react comment chat share respond answer describe explain".split()
)
_SMALL_TALK = (
    "Well played, everyone.",
    "That was closer than it looked.",
    "I will do better next round.",
    "Lucky numbers all around.",
    "Nobody saw that coming.",
)


def decide(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: Any
) -> DemoTurn:
    by_name = _tools_by_name(tools)
    if any(name in by_name for name in TEAM_MARKERS):
        # Team tools (mail.core.team): quiet digests are context, not requests; the lead
        # and file recipients follow the scripted team flow of `demo_team`.
        messages = [m for m in messages if not _is_digest(m)]
        if not isinstance(tool_choice, dict):
            calls = lead_turn(by_name, messages) or teammate_turn(by_name, messages)
            if calls:
                return DemoTurn(calls=calls)
    return DemoBrain(messages, tools, tool_choice).decide()


def _is_digest(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, str)
        and content.startswith(DIGEST_PREFIX)
    )


# What the demo model does for an agent that drafts emails under human review.
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_RECIPIENT_KEYS = ("to", "recipient", "recipients", "email", "address", "email_address")


class _ToolLike(Protocol):
    name: str
    parameters: dict[str, Any]


def question_action(actions: list[Any]) -> Any | None:
    for tool in actions:
        lowered = tool.name.lower()
        if "question" in lowered or lowered.startswith("ask"):
            return tool
    return None


def draft_action(actions: list[Any]) -> Any | None:
    for tool in actions:
        properties = (tool.parameters or {}).get("properties") or {}
        if "body" in properties and any(k in properties for k in _RECIPIENT_KEYS):
            return tool
    return None


def is_status(result: str) -> bool:
    """A tool result the runtime wrote (not words a reviewer typed)."""
    return result.startswith(("SUCCESS", "ERROR", REJECTED_PREFIX))


def ask_recipient(question: _ToolLike) -> tuple[str, dict[str, Any]]:
    text = "Who should receive this email? Please give me their address."
    return question.name, fill_arguments(question.parameters, text)


def draft(tool: _ToolLike, request: Incoming, extra: str = "") -> tuple[str, dict[str, Any]]:
    """Arguments of a drafted email for `request` (plus the person's answer, if any)."""
    text = f"{request.body} {extra}".strip()
    args = fill_arguments(tool.parameters, text)
    properties = (tool.parameters or {}).get("properties") or {}
    found = EMAIL.search(text)
    for key in properties:
        if key in _RECIPIENT_KEYS:
            args[key] = found.group(0) if found else extra.strip()
        elif key == "subject":
            subject = request.subject if request.subject not in ("", "New Message") else ""
            args[key] = subject or summarize(EMAIL.sub("", request.body).strip(" ,."), 60)
    topic = EMAIL.sub("", request.body).strip(" ,.")
    args["body"] = f"Hello,\n\n{summarize(topic, 400)}\n\nBest regards"
    return tool.name, args


def redraft(tool: _ToolLike, previous: dict[str, Any], feedback: str) -> tuple[str, dict[str, Any]]:
    revised = dict(previous)
    revised["body"] = f"{previous.get('body', '')}\n\n(Revised after your feedback: {feedback})"
    return tool.name, revised


def after_review(
    actions: list[Any],
    names: list[str],
    args: list[dict[str, Any]],
    results: list[str],
    origin: Incoming | None,
) -> tuple[str, dict[str, Any]] | None:
    """The next call after a reviewed batch, or None for the ordinary behaviour."""
    question, drafting = question_action(actions), draft_action(actions)
    if question is None or drafting is None or origin is None or not results:
        return None
    answer = results[-1]
    if is_status(answer):
        return None
    if names and names[-1] == question.name:
        return draft(drafting, origin, answer)
    if names and names[-1] == drafting.name:
        return redraft(drafting, args[-1] if args else {}, answer)
    return None


def new_request(actions: list[Any], request: Incoming) -> tuple[str, dict[str, Any]] | None:
    question, drafting = question_action(actions), draft_action(actions)
    if question is None or drafting is None:
        return None
    if not EMAIL.search(f"{request.subject} {request.body}"):
        return ask_recipient(question)
    return draft(drafting, request)
