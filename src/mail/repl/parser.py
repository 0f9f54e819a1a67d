"""The REPL's command line grammar: one argparse sub-parser per command, errors as exceptions."""

from __future__ import annotations

import argparse
import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from mail.a2a.repl import configure_a2a_send, configure_task_cancel
from mail.repl.crons import COMMANDS as CRON_COMMANDS
from mail.repl.webhooks import COMMANDS as WEBHOOK_COMMANDS

# What POST /message accepts (mail.server.bodies.POSTABLE_MESSAGE_TYPES; a test keeps the two
# equal): responses and interrupts are for agents, the server refuses them from a caller.
MSG_TYPES = ("request", "broadcast")
RESUME_FROM = ("user_response", "breakpoint_tool_call", "action_review")
REVIEW_TYPES = ("accept", "edit", "ignore", "respond")
MULTITASK_STRATEGIES = ("reject", "enqueue", "interrupt", "rollback")


class ReplUsageError(Exception):
    """A command line the parser rejected; `usage` is the command's usage line."""

    def __init__(self, message: str, usage: str = "") -> None:
        super().__init__(message)
        self.usage = usage


class ReplHelpShown(Exception):
    """`-h` printed a command's help; nothing else to do."""


class ReplArgumentParser(argparse.ArgumentParser):
    # Filled by build_parser() on the top-level parser: command name -> its sub-parser.
    command_parsers: dict[str, argparse.ArgumentParser]
    # Where help text goes; the REPL points it at its console instead of sys.stdout.
    printer: Callable[[str], None] | None = None

    def _print_message(self, message: str, file: Any = None) -> None:
        if message and self.printer is not None:
            self.printer(message)
        else:
            super()._print_message(message, file)

    def error(self, message: str) -> NoReturn:
        raise ReplUsageError(message, self.format_usage().strip())

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if status:
            raise ReplUsageError((message or "").strip() or "invalid command")
        raise ReplHelpShown()


@dataclass(frozen=True)
class CommandSpec:
    name: str
    aliases: tuple[str, ...]
    summary: str
    configure: Callable[[argparse.ArgumentParser], None] = field(default=lambda parser: None)


def json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc}): {text!r}") from exc


def json_object(text: str) -> dict[str, Any]:
    value = json_value(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"expected a JSON object like '{{\"key\": 1}}', got {text!r}"
        )
    return value


def json_list(text: str) -> list[Any]:
    value = json_value(text)
    if not isinstance(value, list):
        raise argparse.ArgumentTypeError(f"expected a JSON list like '[...]', got {text!r}")
    return value


def target_list(text: str) -> list[str]:
    """`a@x,b@y` or `'["a@x", "b@y"]'` → `["a@x", "b@y"]`."""
    stripped = text.strip()
    if stripped.startswith("["):
        items = json_list(stripped)
        if not all(isinstance(item, str) and item.strip() for item in items):
            raise argparse.ArgumentTypeError("every target must be a non-empty string")
        return [item.strip() for item in items]
    targets = [part.strip() for part in stripped.split(",") if part.strip()]
    if not targets:
        raise argparse.ArgumentTypeError(f"no targets in {text!r}")
    return targets


def _verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", help="print the raw JSON answer")


def _one(name: str) -> Callable[[argparse.ArgumentParser], None]:
    """A command's configure: one positional argument `name`, and -v."""

    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(name)
        _verbose(parser)

    return configure


def _message_options(parser: argparse.ArgumentParser, *, show_events: bool) -> None:
    parser.add_argument("body", nargs="+", help="message text (quote it, or give several words)")
    parser.add_argument("-s", "--subject", default="New Message")
    parser.add_argument("-t", "--msg-type", default="request", choices=MSG_TYPES)
    parser.add_argument("-tid", "--task-id", help="continue this task instead of starting one")
    parser.add_argument("-e", "--entrypoint", help="agent that receives the message")
    parser.add_argument("-rf", "--resume-from", choices=RESUME_FROM)
    parser.add_argument(
        "-k",
        "--kwargs",
        type=json_object,
        default={},
        help='JSON object of extra options, e.g. \'{"breakpoint_tool_call_result": "..."}\'',
    )
    parser.add_argument(
        "-a",
        "--attach",
        action="append",
        default=[],
        metavar="FILE",
        help="send a local file with the message (repeatable; for agents with file tools)",
    )
    parser.add_argument(
        "-mt",
        "--multitask",
        choices=MULTITASK_STRATEGIES,
        help="what the message does when -tid names a task that is still running",
    )
    if show_events:
        parser.add_argument("-se", "--show-events", action="store_true")
        parser.add_argument(
            "-b",
            "--background",
            action="store_true",
            help="answer once the task is stored (202); with -f, then follow its events",
        )
        parser.add_argument("-f", "--follow", action="store_true", help="with -b: follow it")
    _verbose(parser)


def _configure_help(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", nargs="?", help="a command to describe")


def _configure_interswarm(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("body")
    parser.add_argument(
        "targets",
        nargs="?",
        type=target_list,
        default=[],
        help="agent@swarm targets: comma-separated or a JSON list",
    )
    parser.add_argument(
        "user_token", nargs="?", help="token for the remote side (default: your API key)"
    )
    parser.add_argument(
        "-T",
        "--target",
        dest="extra_targets",
        action="append",
        type=target_list,
        default=[],
        help="add a target (repeatable)",
    )
    parser.add_argument("-s", "--subject")
    parser.add_argument("-t", "--msg-type", choices=("request", "broadcast"))
    parser.add_argument("-tid", "--task-id")
    parser.add_argument("-ri", "--routing-info", type=json_object)
    parser.add_argument("--stream", action="store_true", default=None)
    parser.add_argument("--ignore-stream-pings", action="store_true", default=None)
    _verbose(parser)


def _configure_swarm_register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name")
    parser.add_argument("base_url")
    parser.add_argument("auth_token", nargs="?")
    parser.add_argument("-V", "--volatile", action="store_true", help="forget it on restart")
    parser.add_argument("-m", "--metadata", type=json_object)
    _verbose(parser)


def _configure_swarm_load(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("json", help="ONE swarm object as JSON text, or @FILE to read it")
    _verbose(parser)


def _configure_responses(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="JSON list of input items (plain text = one user message)")
    parser.add_argument("tools", type=json_list, help="JSON list of tools")
    parser.add_argument("-i", "--instructions")
    parser.add_argument("-pr", "--previous-response-id")
    parser.add_argument("-tc", "--tool-choice")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-ptc", "--parallel-tool-calls", action="store_true", default=None)
    group.add_argument("--no-ptc", dest="parallel_tool_calls", action="store_false")
    parser.add_argument("-k", "--kwargs", type=json_object, default={})
    _verbose(parser)


def review_decision(text: str) -> dict[str, Any]:
    """`CALL_ID=accept`, `CALL_ID=edit:{json args}`, `CALL_ID=respond:text`, `CALL_ID=ignore[:note]`."""
    call_id, sep, rest = text.partition("=")
    kind, _, payload = rest.partition(":")
    if not sep or not call_id.strip() or kind not in REVIEW_TYPES:
        close = difflib.get_close_matches(kind, REVIEW_TYPES, n=1, cutoff=0.6)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise argparse.ArgumentTypeError(
            f"expected CALL_ID=DECISION with DECISION one of {', '.join(REVIEW_TYPES)}, "
            f"got {text!r}.{hint}"
        )
    decision: dict[str, Any] = {"tool_call_id": call_id.strip(), "type": kind}
    if kind == "edit":
        if not payload:
            raise argparse.ArgumentTypeError(
                f'edit needs the new arguments: {call_id}=edit:\'{{"key": "value"}}\''
            )
        decision["args"] = json_object(payload)
    elif kind == "respond":
        if not payload.strip():
            raise argparse.ArgumentTypeError(f"respond needs a message: {call_id}=respond:TEXT")
        decision["message"] = payload
    elif kind == "ignore" and payload:
        decision["message"] = payload
    return decision


def _configure_review(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task_id", help="the task holding calls for review")
    parser.add_argument(
        "decisions",
        nargs="*",
        type=review_decision,
        help="CALL_ID=accept | CALL_ID=edit:JSON | CALL_ID=respond:TEXT | CALL_ID=ignore[:NOTE]; "
        "none: show the held calls",
    )
    parser.add_argument(
        "-j", "--json", dest="decisions_json", type=json_list, help="decisions as a JSON list"
    )
    parser.add_argument("-se", "--show-events", action="store_true")
    _verbose(parser)


def _configure_task_events(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task_id")
    parser.add_argument(
        "-a", "--after", help="start after this event id (default: replay every event)"
    )
    _verbose(parser)


def _configure_attachment(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("attachment_id")
    parser.add_argument("output", nargs="?", help="save to this file (default: print as text)")


COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec("help", ("?",), "list commands, or describe one: help COMMAND", _configure_help),
    CommandSpec("exit", ("quit",), "leave the REPL"),
    CommandSpec("ping", ("p",), "GET / — is the server there, and which swarm is it?", _verbose),
    CommandSpec("health", ("h",), "GET /health", _verbose),
    CommandSpec("health-update", ("hu",), "POST /health STATUS (admin)", _one("status")),
    CommandSpec(
        "login", ("l",), "use API_KEY from now on (checked with GET /whoami)", _one("api_key")
    ),
    CommandSpec("logout", ("lo",), "forget the API key (local only)"),
    CommandSpec("whoami", ("me", "id"), "GET /whoami", _verbose),
    CommandSpec("status", ("s",), "GET /status", _verbose),
    CommandSpec(
        "message",
        ("m", "msg"),
        "send a message and wait for the answer",
        lambda p: _message_options(p, show_events=True),
    ),
    CommandSpec(
        "message-stream",
        ("ms", "msg-s"),
        "send a message and print events as they arrive",
        lambda p: _message_options(p, show_events=False),
    ),
    CommandSpec(
        "message-interswarm",
        ("mi", "msg-i"),
        "message agents of other swarms: BODY TARGETS [TOKEN]",
        _configure_interswarm,
    ),
    CommandSpec("swarms-get", ("sg", "swarms-g"), "GET /swarms", _verbose),
    CommandSpec(
        "swarm-register",
        ("sr", "swarm-r"),
        "POST /swarms NAME URL [TOKEN] (admin)",
        _configure_swarm_register,
    ),
    CommandSpec("swarm-dump", ("sd", "swarm-d"), "GET /swarms/dump (admin)", _verbose),
    CommandSpec(
        "swarm-load-from-json",
        ("sl", "swarm-l"),
        "POST /swarms/load JSON (admin)",
        _configure_swarm_load,
    ),
    CommandSpec(
        "responses",
        ("r", "resp"),
        "POST /responses INPUT TOOLS (server in --debug)",
        _configure_responses,
    ),
    CommandSpec("tasks-get", ("tsg", "tasks-g"), "GET /tasks", _verbose),
    CommandSpec("task-get", ("tg", "task-g"), "GET /task ID", _one("task_id")),
    CommandSpec(
        "review",
        ("rv",),
        "show a task's calls held for review, or decide them: review ID [CALL=DECISION ...]",
        _configure_review,
    ),
    CommandSpec(
        "task-events",
        ("te", "task-e"),
        "GET /task/events ID: replay a task's events, then follow it live",
        _configure_task_events,
    ),
    CommandSpec("threads-get", ("thg",), "GET /threads — team threads", _verbose),
    CommandSpec(
        "thread-get", ("th",), "GET /threads/ID — posts and unread counts", _one("thread_id")
    ),
    CommandSpec(
        "attachment-get", ("att",), "GET /attachments/ID [FILE] — download", _configure_attachment
    ),
    CommandSpec(
        "task-cancel", ("tc",), "POST /task/cancel ID — stop a task", configure_task_cancel
    ),
    CommandSpec(
        "a2a-send", ("a2a",), "send TEXT over A2A (this server, or --url AGENT)", configure_a2a_send
    ),
    *(
        CommandSpec(name, aliases, summary, configure)
        for name, (aliases, summary, configure, _) in WEBHOOK_COMMANDS.items()
    ),
    *(
        CommandSpec(name, aliases, summary, configure)
        for name, (aliases, summary, configure, _) in CRON_COMMANDS.items()
    ),
)

_BY_NAME: dict[str, CommandSpec] = {}
for _spec in COMMANDS:
    for _word in (_spec.name, *_spec.aliases):
        _BY_NAME[_word] = _spec


def resolve_command(word: str) -> CommandSpec:
    """Map a command name or alias to its spec; unknown words get a did-you-mean hint."""
    spec = _BY_NAME.get(word)
    if spec is not None:
        return spec
    close = difflib.get_close_matches(word, list(_BY_NAME), n=1, cutoff=0.6)
    hint = f" Did you mean '{_BY_NAME[close[0]].name}'?" if close else ""
    raise ReplUsageError(f"unknown command '{word}'.{hint} Type 'help' to list commands.")


def command_words() -> list[str]:
    return sorted(_BY_NAME)


def build_parser(printer: Callable[[str], None] | None = None) -> ReplArgumentParser:
    parser = ReplArgumentParser(prog="", add_help=False)
    parser.printer = printer
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.command_parsers = {}
    for spec in COMMANDS:
        command_parser = sub.add_parser(
            spec.name,
            aliases=list(spec.aliases),
            help=spec.summary,
            description=spec.summary,
            prog=spec.name,
        )
        # With aliases argparse stores the word typed; the default normalises it to the name.
        command_parser.set_defaults(command=spec.name)
        if isinstance(command_parser, ReplArgumentParser):
            command_parser.printer = printer
        spec.configure(command_parser)
        parser.command_parsers[spec.name] = command_parser
    return parser


def parse_command(parser: ReplArgumentParser, words: list[str]) -> argparse.Namespace:
    spec = resolve_command(words[0])  # clearer message than argparse's "invalid choice" list
    args, extra = parser.parse_known_args(words)
    if extra:
        # Reported against the command, with its own usage line (not the generic one).
        command_parser = parser.command_parsers[spec.name]
        options = [o for action in command_parser._actions for o in action.option_strings]
        first = extra[0]
        hint = ""
        if first.startswith("-"):
            close = difflib.get_close_matches(first, options, n=1, cutoff=0.6)
            hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ReplUsageError(
            f"'{spec.name}' does not take {' '.join(extra)!r}.{hint} "
            f"Type '{spec.name} -h' for its options.",
            command_parser.format_usage().strip(),
        )
    return args
