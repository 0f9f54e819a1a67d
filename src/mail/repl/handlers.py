"""What each REPL command does: one small coroutine per command, looked up in HANDLERS."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mail.a2a.repl import do_a2a_send, do_task_cancel
from mail.client import MAILClient
from mail.repl.crons import COMMANDS as CRON_COMMANDS
from mail.repl.parser import COMMANDS, ReplArgumentParser, ReplUsageError, resolve_command
from mail.repl.render import Renderer, local_time, parse_event_data
from mail.repl.webhooks import COMMANDS as WEBHOOK_COMMANDS
from mail.telemetry.usage import usage_text


class ReplQuit(Exception):
    """Raised by `exit`/`quit` to end the loop."""


@dataclass
class ReplContext:
    client: MAILClient
    render: Renderer
    parser: ReplArgumentParser
    # Why the last key given was refused, until a login succeeds or `logout`: the client has
    # forgotten the key, and "no API key provided" would not be the whole story.
    refused: str | None = None

    async def login(self, api_key: str) -> dict[str, Any]:
        try:
            identity = await self.client.login(api_key)
        except (RuntimeError, ValueError) as exc:
            self.refused = str(exc.__cause__ or exc)
            raise
        self.refused = None
        return identity


Handler = Callable[[ReplContext, argparse.Namespace], Coroutine[Any, Any, None]]


def identity_label(role: str | None, user_id: str | None) -> str:
    return f"{role or '?'}:{user_id or '?'}"


# ---------------------------------------------------------------------- session commands


async def do_help(ctx: ReplContext, args: argparse.Namespace) -> None:
    if args.topic:
        spec = resolve_command(args.topic)
        ctx.render.info(ctx.parser.command_parsers[spec.name].format_help().rstrip())
        return
    ctx.render.help((spec.name, spec.aliases, spec.summary) for spec in COMMANDS)


async def do_exit(ctx: ReplContext, args: argparse.Namespace) -> None:
    raise ReplQuit()


def _shown_as_json(ctx: ReplContext, args: argparse.Namespace, result: Any) -> bool:
    """With --verbose the server's JSON answer is the whole output: shown here, and True."""
    if args.verbose:
        ctx.render.json(result)
    return bool(args.verbose)


async def do_ping(ctx: ReplContext, args: argparse.Namespace) -> None:
    root = await ctx.client.ping()
    if _shown_as_json(ctx, args, root):
        return
    swarm = root.get("swarm") or {}
    version = root.get("protocol_version", root.get("version", "?"))
    ctx.render.success(
        f"pong — {root.get('name', 'mail')} (protocol {version}), swarm "
        f"{swarm.get('name', '?')} v{swarm.get('version', '?')}, status {root.get('status', '?')}"
    )


async def do_health(ctx: ReplContext, args: argparse.Namespace) -> None:
    health = await ctx.client.get_health()
    if _shown_as_json(ctx, args, health):
        return
    ctx.render.success(
        f"{health.get('swarm_name', '?')} is {health.get('status', '?')} "
        f"(since {health.get('timestamp', '?')})"
    )


async def do_health_update(ctx: ReplContext, args: argparse.Namespace) -> None:
    health = await ctx.client.update_health(args.status)
    if _shown_as_json(ctx, args, health):
        return
    ctx.render.success(f"health of {health.get('swarm_name', '?')} is now {health.get('status')}")


async def do_login(ctx: ReplContext, args: argparse.Namespace) -> None:
    identity = await ctx.login(args.api_key)
    if args.verbose:
        ctx.render.json(identity)
    ctx.render.success(f"logged in as {identity_label(ctx.client.user_role, ctx.client.user_id)}")


async def do_logout(ctx: ReplContext, args: argparse.Namespace) -> None:
    ctx.client.logout()
    ctx.refused = None
    ctx.render.success("logged out (the API key is forgotten for this session)")


def not_logged_in(refused: str) -> str:
    """What a command the server refused for want of a key says after a refused login."""
    return f"not logged in: the API key given was refused ({refused}); use 'login KEY'"


async def do_whoami(ctx: ReplContext, args: argparse.Namespace) -> None:
    if ctx.client.api_key is None and ctx.refused:
        raise RuntimeError(not_logged_in(ctx.refused))
    identity = await ctx.client.get_whoami()
    if _shown_as_json(ctx, args, identity):
        return
    user_id = identity.get("id", identity.get("username"))
    ctx.render.info(identity_label(identity.get("role"), None if user_id is None else str(user_id)))


async def do_status(ctx: ReplContext, args: argparse.Namespace) -> None:
    status = await ctx.client.get_status()
    if _shown_as_json(ctx, args, status):
        return
    swarm = status.get("swarm") or {}
    ctx.render.fields(
        [
            ("swarm", f"{swarm.get('name', '?')} ({swarm.get('status', '?')})"),
            ("active users", status.get("active_users")),
            ("your instance ready", status.get("user_mail_ready")),
            ("your task loop running", status.get("user_task_running")),
        ]
    )


# ---------------------------------------------------------------------- messaging


def _message_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs = {
        "subject": args.subject,
        "msg_type": args.msg_type,
        "entrypoint": args.entrypoint,
        "task_id": args.task_id,
        "resume_from": args.resume_from,
        "multitask_strategy": args.multitask,
        **args.kwargs,
    }
    files = getattr(args, "attach", None) or []
    if files:
        kwargs["attachments"] = [ctx_attachment(path) for path in files]
    return kwargs


def ctx_attachment(path: str) -> dict[str, Any]:
    try:
        return MAILClient.attachment_from_file(path)
    except OSError as exc:
        raise ValueError(f"cannot attach {path}: {exc.strerror or exc}") from exc


async def do_message(ctx: ReplContext, args: argparse.Namespace) -> None:
    if args.background:
        await _message_in_background(ctx, args)
        return
    with ctx.render.console.status("waiting for the swarm's answer…", spinner="dots"):
        result = await ctx.client.post_message(
            " ".join(args.body), show_events=args.show_events, **_message_kwargs(args)
        )
    if _shown_as_json(ctx, args, result):
        return
    if result.get("events"):
        ctx.render.events(result["events"])
    _render_answer(ctx, result)
    if result.get("task_id") and not held_calls_in(result.get("response")):
        # What `-tid` takes to continue the task (a held call's lines name it already).
        ctx.render.info(f"task {result['task_id']}", style="dim")


async def _message_in_background(ctx: ReplContext, args: argparse.Namespace) -> None:
    """``message -b``: the 202 (the task is stored and runs on); with ``-f``, its events."""
    accepted = await ctx.client.post_message(
        " ".join(args.body), background=True, **_message_kwargs(args)
    )
    if _shown_as_json(ctx, args, accepted) and not args.follow:
        return
    task_id = accepted.get("task_id")
    ctx.render.info(
        f"task {task_id} accepted ({accepted.get('state')}); follow it: task-events {task_id}"
    )
    if args.follow and task_id:
        with ctx.render.console.status("waiting for events…", spinner="dots") as status:
            stream = await ctx.client.resubscribe_task(task_id)
            final, count = await _follow_stream(ctx, stream, task_id, args.verbose, status)
        _show_final(ctx, final, count, args.verbose)


def held_calls_in(response: Any) -> list[dict[str, Any]]:
    """The held calls when an answer is an `::action_review::` body, else []."""
    if not isinstance(response, str) or not response.startswith("["):
        return []
    try:
        value = json.loads(response)
    except ValueError:
        return []
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(v, dict) and "tool_call_id" in v and "allowed_decisions" in v for v in value
        )
    ):
        return value
    return []


_DECISION_FORMS = {
    "accept": "{id}=accept",
    "edit": "{id}=edit:'{{...}}'",
    "respond": "{id}=respond:TEXT",
    "ignore": "{id}=ignore",
}


def decision_hint(task_id: Any, call: dict[str, Any]) -> str:
    """The `review` line for one held call, offering only the decisions the call allows."""
    call_id = call.get("tool_call_id") or "CALL_ID"
    allowed = [d for d in _DECISION_FORMS if d in (call.get("allowed_decisions") or [])]
    forms = " | ".join(_DECISION_FORMS[d].format(id=call_id) for d in allowed)
    return f"decide with: review {task_id} {forms}"


def _show_held(ctx: ReplContext, task_id: Any, held: list[dict[str, Any]]) -> None:
    for h in held:
        # Full ids (never truncated): they are what the decisions are typed with.
        ctx.render.info(
            f"{h.get('tool_call_id')}  {h.get('action')} by {h.get('caller')}  "
            f"(allowed: {', '.join(h.get('allowed_decisions') or [])})",
            style="bold",
        )
        ctx.render.json(h.get("args"))
        ctx.render.info(decision_hint(task_id, h), soft_wrap=True)


def _render_answer(ctx: ReplContext, result: dict[str, Any]) -> None:
    """The task's answer; a pause for review is shown as the held calls."""
    held = held_calls_in(result.get("response"))
    if not held:
        ctx.render.response(result.get("response"))
        return
    task_id = result.get("task_id")
    ctx.render.info(f"{len(held)} call(s) wait for your review: review {task_id}", style="bold")
    _show_held(ctx, task_id, held)


async def do_message_stream(ctx: ReplContext, args: argparse.Namespace) -> None:
    with ctx.render.console.status("sending…", spinner="dots") as status:
        stream = await ctx.client.post_message_stream(" ".join(args.body), **_message_kwargs(args))
        status.update("waiting for events…")
        final, count = await _follow_stream(ctx, stream, args.task_id, args.verbose, status)
    _show_final(ctx, final, count, args.verbose)


async def do_task_events(ctx: ReplContext, args: argparse.Namespace) -> None:
    with ctx.render.console.status("attaching…", spinner="dots") as status:
        stream = await ctx.client.resubscribe_task(args.task_id, args.after)
        status.update("waiting for events…")
        final, count = await _follow_stream(ctx, stream, args.task_id, args.verbose, status)
    _show_final(ctx, final, count, args.verbose)


# How often a stream that drops or is asked to resubscribe is re-attached in a row.
MAX_REATTACH = 3


async def _follow_stream(
    ctx: ReplContext, stream: Any, task_id: str | None, verbose: bool, status: Any
) -> tuple[tuple[str, Any] | None, int]:
    """Print events until the final one, re-attaching (GET /task/events) after a drop or an
    ``event: resubscribe``, from the last event id seen, so nothing is shown twice."""
    count = 0
    attempts = 0
    last_id: str | None = None
    final: tuple[str, Any] | None = None
    while True:
        reattach = False
        try:
            async with stream:
                async for event in stream:
                    if event.id is not None:
                        last_id = event.id
                    data = parse_event_data(event.data)
                    if task_id is None and isinstance(data, dict):
                        task_id = data.get("task_id") or None
                    if event.event == "resubscribe":
                        if isinstance(data, dict) and data.get("last_event_id"):
                            last_id = str(data["last_event_id"])
                        reattach = True
                        break
                    count += 1
                    attempts = 0
                    ctx.render.event(event.event, event.data, verbose)
                    if event.event in ("task_complete", "task_error"):
                        final = (event.event, data)
                    status.update(f"{count} events so far; waiting for more…")
        except RuntimeError as exc:  # the connection dropped
            ctx.render.warn(f"stream interrupted: {exc}")
            reattach = True
        if not reattach or task_id is None or attempts >= MAX_REATTACH:
            return final, count
        attempts += 1
        ctx.render.warn(f"re-attaching to task {task_id} after event {last_id or 0}…")
        stream = await ctx.client.resubscribe_task(task_id, last_id)


def _show_final(ctx: ReplContext, final: tuple[str, Any] | None, count: int, verbose: bool) -> None:
    if final is None:
        ctx.render.warn(f"the stream ended after {count} events without task_complete")
        return
    name, data = final
    body = data.get("response") if isinstance(data, dict) else data
    if name == "task_error":
        ctx.render.error(f"task failed: {body}")
    elif not verbose:
        ctx.render.response(body)


async def do_message_interswarm(ctx: ReplContext, args: argparse.Namespace) -> None:
    targets = list(args.targets)
    for extra in args.extra_targets:
        targets.extend(extra)
    if not targets:
        raise ReplUsageError("give at least one target: BODY agent@swarm[,agent@swarm] [TOKEN]")
    user_token = args.user_token or ctx.client.api_key
    if not user_token:
        raise ReplUsageError("no user token: pass one after the targets, or 'login' first")
    with ctx.render.console.status("waiting for the remote swarm…", spinner="dots"):
        result = await ctx.client.send_interswarm_message(
            args.body,
            user_token,
            subject=args.subject,
            targets=targets,
            msg_type=args.msg_type,
            task_id=args.task_id,
            routing_info=args.routing_info,
            stream=args.stream,
            ignore_stream_pings=args.ignore_stream_pings,
        )
    if _shown_as_json(ctx, args, result):
        return
    response = result.get("response")
    if isinstance(response, dict) and isinstance(response.get("message"), dict):
        ctx.render.response(
            response["message"].get("body"), title=f"response from {', '.join(targets)}"
        )
    else:
        ctx.render.json(result)


# ---------------------------------------------------------------------- registry


async def do_swarms_get(ctx: ReplContext, args: argparse.Namespace) -> None:
    result = await ctx.client.get_swarms()
    swarms = result.get("swarms", [])
    if _shown_as_json(ctx, args, result):
        return
    ctx.render.table(
        ["swarm", "base url", "version", "active", "last seen"],
        (
            [
                s.get("swarm_name"),
                s.get("base_url"),
                s.get("version"),
                s.get("is_active"),
                s.get("last_seen"),
            ]
            for s in swarms
        ),
        empty="no public swarms known",
    )


async def do_swarm_register(ctx: ReplContext, args: argparse.Namespace) -> None:
    result = await ctx.client.register_swarm(
        args.name,
        args.base_url,
        auth_token=args.auth_token,
        volatile=args.volatile,
        metadata=args.metadata,
    )
    if _shown_as_json(ctx, args, result):
        return
    kind = "volatile" if args.volatile else "persistent"
    ctx.render.success(
        f"{result.get('status', 'registered')} {kind} swarm {result.get('swarm_name', args.name)}"
    )


async def do_swarm_dump(ctx: ReplContext, args: argparse.Namespace) -> None:
    result = await ctx.client.dump_swarm()
    if _shown_as_json(ctx, args, result):
        return
    ctx.render.success(f"{result.get('status')} swarm {result.get('swarm_name')} to the server log")


async def do_swarm_load(ctx: ReplContext, args: argparse.Namespace) -> None:
    text = args.json
    if text.startswith("@"):
        try:
            text = Path(text[1:]).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise ReplUsageError(f"cannot read {text[1:]}: {exc}") from exc
    try:
        json.loads(text)
    except ValueError as exc:
        raise ReplUsageError(f"the swarm is not valid JSON: {exc}") from exc
    result = await ctx.client.load_swarm_from_json(text)
    if _shown_as_json(ctx, args, result):
        return
    ctx.render.success(f"loaded swarm {result.get('swarm_name')} (used by new instances)")


# ---------------------------------------------------------------------- debug and tasks


async def do_responses(ctx: ReplContext, args: argparse.Namespace) -> None:
    try:
        items = json.loads(args.input)
    except ValueError:
        items = [{"role": "user", "content": args.input}]
    if not isinstance(items, list):
        raise ReplUsageError("INPUT must be a JSON list of items (or plain text)")
    tool_choice: Any = args.tool_choice
    if tool_choice and tool_choice.lstrip().startswith("{"):
        tool_choice = json.loads(tool_choice)
    with ctx.render.console.status("waiting for /responses…", spinner="dots"):
        response = await ctx.client.debug_post_responses(
            items,
            args.tools,
            instructions=args.instructions,
            previous_response_id=args.previous_response_id,
            tool_choice=tool_choice,
            parallel_tool_calls=args.parallel_tool_calls,
            **args.kwargs,
        )
    dumped = response.model_dump(mode="json") if hasattr(response, "model_dump") else response
    if _shown_as_json(ctx, args, dumped):
        return
    text = getattr(response, "output_text", None)
    ctx.render.response(text if text else dumped, title=f"response {getattr(response, 'id', '')}")


def _task_state(task: dict[str, Any]) -> str:
    """The record's `state` (waiting_for_review, ...); older servers send only the flags."""
    if task.get("state"):
        return str(task["state"])
    if task.get("is_running"):
        return "running"
    return "completed" if task.get("completed") else "idle"


def _question(task: dict[str, Any], limit: int = 40) -> str:
    """The task's title or first message on one line, cut to `limit` characters."""
    text = " ".join(str(task.get("title") or task.get("first_message") or "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


async def do_tasks_get(ctx: ReplContext, args: argparse.Namespace) -> None:
    tasks = await ctx.client.get_tasks()
    if _shown_as_json(ctx, args, tasks):
        return
    # A user's tasks are all their own (the prompt names them): the owner column is shown
    # only when the list mixes owners (an admin's, with remote swarms' tasks).
    owners = len({task.get("task_owner") for task in tasks.values()}) > 1
    ctx.render.table(
        ["task id", "started", "question", *(["owner"] if owners else []), "state"]
        + ["tokens", "cost", "events"],
        (
            [
                task_id,
                local_time(task["start_time"]) if task.get("start_time") else "-",
                _question(task),
                *([task.get("task_owner")] if owners else []),
                _task_state(task),
                # GET /tasks summaries carry event_count, not the events themselves.
                (task.get("usage") or {}).get("total_tokens", "-"),
                (task.get("usage") or {}).get("cost", "-"),
                task.get("event_count", len(task.get("events") or [])),
            ]
            for task_id, task in tasks.items()
        ),
        empty="no tasks yet",
    )


async def do_task_get(ctx: ReplContext, args: argparse.Namespace) -> None:
    task = await ctx.client.get_task(args.task_id)
    if _shown_as_json(ctx, args, task):
        return
    ctx.render.fields(
        [
            (key, task.get(key))
            for key in (
                "task_id",
                "task_owner",
                "task_contributors",
                "start_time",
                "is_running",
                "completed",
                "state",
                "remote_swarms",
            )
            if key in task
        ]
        + ([("usage", usage_text(task["usage"]))] if "usage" in task else [])
    )
    events = task.get("events") or []
    ctx.render.info(f"{len(events)} events", style="bold")
    ctx.render.events(events)


async def do_review(ctx: ReplContext, args: argparse.Namespace) -> None:
    decisions = list(args.decisions or []) + list(args.decisions_json or [])
    if not decisions:
        held = await ctx.client.get_pending_reviews(args.task_id)
        if _shown_as_json(ctx, args, held):
            return
        if not held:
            ctx.render.info(f"task {args.task_id} has no calls waiting for review")
            return
        _show_held(ctx, args.task_id, held)
        return
    with ctx.render.console.status("applying decisions; waiting for the swarm…", spinner="dots"):
        result = await ctx.client.review_actions(
            args.task_id, decisions, show_events=args.show_events
        )
    if _shown_as_json(ctx, args, result):
        return
    if result.get("events"):
        ctx.render.events(result["events"])
    _render_answer(ctx, result)


async def do_threads(ctx: ReplContext, args: argparse.Namespace) -> None:
    result = await ctx.client.get_threads()
    if _shown_as_json(ctx, args, result):
        return
    threads = result.get("threads") or []
    ctx.render.table(
        ["thread id", "title", "creator", "participants", "owner"],
        (
            [t["thread_id"], t["title"], t["creator"], ", ".join(t["participants"]), t.get("owner")]
            for t in threads
        ),
        empty="no threads yet",
    )


async def do_thread(ctx: ReplContext, args: argparse.Namespace) -> None:
    thread = await ctx.client.get_thread(args.thread_id)
    if _shown_as_json(ctx, args, thread):
        return
    ctx.render.fields(
        [
            ("thread_id", thread.get("thread_id")),
            ("title", thread.get("title")),
            ("creator", thread.get("creator")),
            ("participants", ", ".join(thread.get("participants") or [])),
            ("unread", thread.get("unread")),
        ]
    )
    ctx.render.table(
        ["time", "from", "kind", "text"],
        (
            [p.get("timestamp"), p.get("sender"), p.get("kind"), p.get("body")]
            for p in thread.get("messages") or []
        ),
    )


async def do_attachment(ctx: ReplContext, args: argparse.Namespace) -> None:
    data = await ctx.client.get_attachment(args.attachment_id)
    if args.output:
        with open(args.output, "wb") as fh:
            fh.write(data)
        ctx.render.success(f"saved {len(data)} bytes to {args.output}")
        return
    try:
        ctx.render.response(data.decode("utf-8"))
    except UnicodeDecodeError:
        ctx.render.info(f"{len(data)} bytes of binary data; give a FILE to save them")


HANDLERS: dict[str, Handler] = {
    "help": do_help,
    "exit": do_exit,
    "ping": do_ping,
    "health": do_health,
    "health-update": do_health_update,
    "login": do_login,
    "logout": do_logout,
    "whoami": do_whoami,
    "status": do_status,
    "message": do_message,
    "message-stream": do_message_stream,
    "message-interswarm": do_message_interswarm,
    "swarms-get": do_swarms_get,
    "swarm-register": do_swarm_register,
    "swarm-dump": do_swarm_dump,
    "swarm-load-from-json": do_swarm_load,
    "responses": do_responses,
    "tasks-get": do_tasks_get,
    "task-get": do_task_get,
    "review": do_review,
    "task-events": do_task_events,
    "threads-get": do_threads,
    "thread-get": do_thread,
    "attachment-get": do_attachment,
    "task-cancel": do_task_cancel,
    "a2a-send": do_a2a_send,
    **{name: spec[3] for name, spec in WEBHOOK_COMMANDS.items()},
    **{name: spec[3] for name, spec in CRON_COMMANDS.items()},
}
