"""The read-eval-print loop of `mail client`."""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

from rich.console import Console

from mail.client import MAILClient, MAILClientError
from mail.client_config import ClientConfig
from mail.repl.handlers import HANDLERS, ReplContext, ReplQuit, not_logged_in
from mail.repl.parser import (
    ReplHelpShown,
    ReplUsageError,
    build_parser,
    command_words,
    parse_command,
)
from mail.repl.render import Renderer

logger = logging.getLogger("mail.client")

HISTORY_FILE_NAME = ".mail_history"
HISTORY_LENGTH = 1000


def history_path() -> Path:
    # expanduser honours $HOME, so tests and sandboxes can redirect the history file.
    return Path(os.path.expanduser("~")) / HISTORY_FILE_NAME


def short_id(user_id: str) -> str:
    return user_id if len(user_id) <= 8 else f"{user_id[:4]}...{user_id[-4:]}"


def _load_readline() -> ModuleType | None:
    try:
        import readline
    except ImportError:  # e.g. Windows without pyreadline: plain input() still works
        return None
    return readline


class MAILREPL:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        config: ClientConfig | None = None,
        console: Console | None = None,
    ) -> None:
        self.client = MAILClient(base_url, api_key=api_key, config=config or ClientConfig())
        self.console = console or Console(highlight=False)
        self.render = Renderer(self.console)
        self.parser = build_parser(printer=self.render.info)
        self.context = ReplContext(self.client, self.render, self.parser)
        self.host = urlsplit(self.client.base_url).netloc or self.client.base_url
        self._readline = _load_readline()

    # ------------------------------------------------------------------ prompt and history

    @property
    def prompt(self) -> str:
        if self.client.api_key and self.client.user_role and self.client.user_id:
            return f"mail::{self.client.user_role}:{short_id(self.client.user_id)}@{self.host}> "
        return "mail> "

    def _setup_readline(self) -> None:
        readline = self._readline
        if readline is None:
            return
        try:
            readline.read_history_file(str(history_path()))
        except OSError:
            pass  # first run, or an unreadable file: start with an empty history
        readline.set_history_length(HISTORY_LENGTH)
        words = command_words()

        def complete(text: str, state: int) -> str | None:
            if readline.get_begidx() != 0:
                return None
            matches = [word + " " for word in words if word.startswith(text)]
            return matches[state] if state < len(matches) else None

        readline.set_completer(complete)
        readline.set_completer_delims(" \t")
        readline.parse_and_bind("tab: complete")

    def _redact_history(self, line: str) -> None:
        """Keep API keys out of the history file: `login KEY` is remembered as `login`."""
        readline = self._readline
        redacted = redact_secrets(line)
        if readline is None or redacted == line:
            return
        length = readline.get_current_history_length()
        if length and readline.get_history_item(length) == line:
            readline.remove_history_item(length - 1)
        readline.add_history(redacted)

    def _save_history(self) -> None:
        if self._readline is None:
            return
        try:
            self._readline.write_history_file(str(history_path()))
        except OSError as exc:
            logger.debug("could not save REPL history: %s", exc)

    # ------------------------------------------------------------------ running

    def run(self) -> int:
        from mail.version import __version__

        self._setup_readline()
        with asyncio.Runner() as runner:
            try:
                if self._server_answers(runner, __version__):
                    self._login_at_start(runner)
                self._loop(runner)
            finally:
                self._save_history()
                runner.run(self.client.aclose())
        return 0

    def _server_answers(self, runner: asyncio.Runner, version: str) -> bool:
        """Greet only after GET /health answered; otherwise say the server is the problem."""
        try:
            health = runner.run(self.client.get_health())
        except KeyboardInterrupt:
            self.render.unreachable(version, self.client.base_url, "interrupted")
            return False
        except MAILClientError as exc:
            self.render.unreachable(
                version, self.client.base_url, f"GET /health answered HTTP {exc.status}"
            )
            return False
        except (RuntimeError, ValueError, OSError) as exc:
            self.render.unreachable(version, self.client.base_url, _first_line(exc))
            return False
        swarm = health.get("swarm_name") if isinstance(health, dict) else None
        self.render.banner(version, self.client.base_url, swarm if isinstance(swarm, str) else None)
        return True

    def _login_at_start(self, runner: asyncio.Runner) -> None:
        key = self.client.api_key
        if not key:
            self.render.info("no API key given: use 'login KEY' to authenticate", style="dim")
            return
        try:
            runner.run(self.context.login(key))
        except KeyboardInterrupt:
            self.render.warn("login interrupted; use 'login KEY' to try again")
            self.client.logout()
        except (RuntimeError, ValueError) as exc:
            self.render.warn(f"{exc}; use 'login KEY' to try again")
        else:
            self.render.success(f"logged in as {self.client.user_role}:{self.client.user_id}")

    def _loop(self, runner: asyncio.Runner) -> None:
        while True:
            try:
                line = input(self.prompt)
            except KeyboardInterrupt:
                self.console.print()  # abandon the line, fresh prompt
                continue
            except EOFError:
                self.console.print()
                return
            self._redact_history(line)
            try:
                self.execute(runner, line)
            except ReplQuit:
                return
            self._save_history()

    def execute(self, runner: asyncio.Runner, line: str) -> None:
        """Run one command line, reporting every failure without leaving the loop."""
        try:
            words = shlex.split(line)
        except ValueError as exc:
            self.render.error(f"cannot parse the line: {exc}")
            return
        if not words:
            return
        try:
            args = parse_command(self.parser, words)
        except ReplHelpShown:
            return
        except ReplUsageError as exc:
            self._usage_error(exc)
            return
        handler = HANDLERS[args.command]
        try:
            runner.run(handler(self.context, args))
        except ReplQuit:
            raise
        except KeyboardInterrupt:
            self.render.warn("interrupted")
        except ReplUsageError as exc:
            self._usage_error(exc)
        except MAILClientError as exc:
            context = self.context
            if exc.status == 401 and context.refused and context.client.api_key is None:
                # The client forgot the refused key: "no API key provided" is not the story.
                self.render.error(not_logged_in(context.refused))
            else:
                self.render.error(
                    f"HTTP {exc.status}: {exc.detail if isinstance(exc.detail, str) else repr(exc.detail)}"
                )
        except (RuntimeError, ValueError) as exc:
            self.render.error(str(exc))
        except Exception as exc:  # a bug of ours must not kill the session
            logger.debug("command %r failed", line, exc_info=True)
            self.render.error(f"unexpected error: {type(exc).__name__}: {exc}")

    def _usage_error(self, exc: ReplUsageError) -> None:
        self.render.error(str(exc))
        if exc.usage:
            self.render.info(exc.usage, style="dim")


def redact_secrets(line: str) -> str:
    """`line` as it may be stored: the key of a `login KEY` line is left out."""
    words = line.split()
    if words and words[0] in ("login", "l") and len(words) > 1:
        return words[0]
    return line


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_repl(base_url: str, api_key: str | None = None, config: ClientConfig | None = None) -> int:
    return MAILREPL(base_url, api_key=api_key, config=config).run()
