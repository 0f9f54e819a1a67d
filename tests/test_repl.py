"""The `mail client` REPL, driven as a person would: through a pseudo-terminal.

The first tests type into a real `mail client` process attached to a pty (so readline,
Ctrl+C and the rich spinner behave as in a terminal) and read the screen. The later ones
call `MAILREPL.execute` in-process to cover every command quickly.
"""

from __future__ import annotations

import asyncio
import datetime
import fcntl
import io
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from mail.client_config import ClientConfig
from mail.repl import MAILREPL
from mail.repl.render import Renderer
from server_fixtures import ROOT_ALICE_BOB, auth, keyed_stub_server
from test_client_fakes import ADMIN_KEY, USER_KEY, FakeMailServer

pytestmark = pytest.mark.timeout(90)

ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]"
)
USER_PROMPT = r"mail::user:alic\.\.\.6789@127\.0\.0\.1:\d+> "

# Become a session leader and adopt the pty as controlling terminal, so that typing Ctrl+C
# sends SIGINT to the REPL exactly as in a terminal emulator; then exec `python -m mail.cli`.
CTTY_WRAPPER = (
    "import fcntl, os, sys, termios; os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable] + sys.argv[1:])"
)


class Terminal:
    def __init__(self, args: list[str], home: Path, cols: int = 120, rows: int = 40) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {k: v for k, v in os.environ.items() if k != "MAIL_CONFIG_PATH"}
        env.update(HOME=str(home), TERM="xterm-256color", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CTTY_WRAPPER, "-m", "mail.cli", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=home,
            close_fds=True,
            # A user's terminal starts programs with Ctrl+C's default; a test run may not (a
            # library earlier in the suite can leave SIGINT ignored, which children inherit:
            # then the REPL never sees Ctrl+C, as three full CI runs showed).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        os.close(slave)
        self.fd = master
        self.raw = b""
        self.consumed = 0

    @property
    def screen(self) -> str:
        return ANSI.sub("", self.raw.decode(errors="replace")).replace("\r", "")

    def _pump(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.raw += chunk
        return bool(chunk)

    def expect(self, pattern: str, timeout: float = 15) -> re.Match[str]:
        """Wait until `pattern` shows up after everything matched so far."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.compile(pattern).search(self.screen, self.consumed)
            if match:
                self.consumed = match.end()
                return match
            remaining = deadline - time.monotonic()
            if (
                remaining <= 0
                or not self._pump(min(remaining, 0.2))
                and self.proc.poll() is not None
            ):
                raise AssertionError(
                    f"{pattern!r} not seen; screen after last match:\n{self.screen[self.consumed :]}"
                )

    def send(self, data: str) -> None:
        os.write(self.fd, data.encode())

    def sendline(self, line: str) -> None:
        self.send(line + "\r")

    def ctrl_c(self) -> None:
        self.send("\x03")

    def wait(self, timeout: float = 15) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._pump(0.1)
        return self.proc.wait(max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        os.close(self.fd)


@pytest.fixture
def server() -> Iterator[FakeMailServer]:
    fake = FakeMailServer().start()
    yield fake
    fake.stop()


@pytest.fixture
def terminal_factory(tmp_path: Path) -> Iterator[object]:
    opened: list[Terminal] = []

    def open_terminal(*args: str) -> Terminal:
        terminal = Terminal(list(args), tmp_path)
        opened.append(terminal)
        return terminal

    yield open_terminal
    for terminal in opened:
        terminal.close()


# ---------------------------------------------------------------------- through a pty


def test_person_session_message_stream_typo_ctrl_c_exit(
    server: FakeMailServer, terminal_factory: object, tmp_path: Path
) -> None:
    term: Terminal = terminal_factory("client", server.url, "--api-key", USER_KEY)  # type: ignore[operator]
    term.expect(r"MAIL CLIent v\d+\.\d+\.\d+")
    term.expect(r"✓ logged in as user:alice-0123456789")
    term.expect(USER_PROMPT)

    term.sendline('message "Hello there"')
    term.expect(r"│ echo: Hello there")
    term.expect(USER_PROMPT)

    # Streaming: the first event is on screen, with the spinner under it, a full second
    # before the server sends the rest.
    term.sendline("message-stream slow but steady")
    term.expect(r"new_message\s+sending message: slow but steady")
    term.expect(r"1 events so far; waiting for more")
    term.expect(r"tool_call\s+line one\s*\n\s*line two")
    term.expect(r"task_complete\s+echo: slow but steady")
    term.expect(r"│ echo: slow but steady")
    term.expect(USER_PROMPT)

    # A typo: a clear message, and the loop goes on.
    term.sendline("mesage hi")
    term.expect(r"✗ unknown command 'mesage'\. Did you mean 'message'\?")
    term.expect(USER_PROMPT)
    term.sendline("message")
    term.expect(r"✗ the following arguments are required: body")
    term.expect(r"usage: message ")
    term.expect(USER_PROMPT)

    # Ctrl+C while a stream is open: back to the prompt, connection closed, session alive.
    term.sendline("message-stream hang")
    term.expect(r"new_message\s+sending message: hang")
    # (once the client waits for the next event; a Ctrl+C that lands while it is still
    # drawing the first one can be lost under load, see the stop 47 note)
    term.expect(r"1 events so far; waiting for more")
    term.ctrl_c()
    term.expect(r"! interrupted")
    term.expect(USER_PROMPT)
    assert server.stream_disconnected.wait(5)
    term.sendline("whoami")
    term.expect(r"\nuser:alice-0123456789\n")
    term.expect(USER_PROMPT)

    # Ctrl+C at the prompt abandons the half-typed line.
    term.send("half typed")
    term.expect("half typed")
    # CPython's readline only notices SIGINT while waiting in select(); a Ctrl+C landing
    # while it is still processing the echoed keys is seen at the next key press. A person
    # never types that fast, so give it a moment like a person would.
    time.sleep(0.3)
    term.ctrl_c()
    term.expect(USER_PROMPT)
    # Up-arrow recalls the previous command (readline history).
    term.send("\x1b[A\r")
    term.expect(r"\nuser:alice-0123456789\n")
    term.expect(USER_PROMPT)

    term.sendline("exit")
    assert term.wait() == 0
    history = (tmp_path / ".mail_history").read_text()
    assert 'message "Hello there"' in history and "mesage hi" in history
    assert "half typed" not in history
    assert "Traceback" not in term.screen


def test_login_logout_change_the_prompt_and_eof_leaves(
    server: FakeMailServer, terminal_factory: object, tmp_path: Path
) -> None:
    term: Terminal = terminal_factory("client", server.url)  # type: ignore[operator]
    term.expect(r"no API key given: use 'login KEY'")
    term.expect(r"\nmail> ")
    term.sendline("status")
    term.expect(r"✗ HTTP 401: no API key provided")
    term.expect(r"\nmail> ")
    term.sendline(f"login {USER_KEY}")
    term.expect(r"✓ logged in as user:alice-0123456789")
    term.expect(USER_PROMPT)
    term.sendline("login nope")
    term.expect(r"✗ MAIL client login failed: HTTP request failed with status code 401")
    term.expect(r"\nmail> ")
    term.sendline("l " + ADMIN_KEY)
    term.expect(r"mail::admin:root@127\.0\.0\.1:\d+> ")
    term.sendline("lo")
    term.expect(r"✓ logged out")
    term.expect(r"\nmail> ")
    term.send("\x04")  # Ctrl+D
    assert term.wait() == 0
    history = (tmp_path / ".mail_history").read_text()
    assert USER_KEY not in history and ADMIN_KEY not in history and "nope" not in history
    assert "login" in history and "status" in history


def test_swarm_link_supplies_server_and_key(
    server: FakeMailServer, terminal_factory: object
) -> None:
    link = f"swarm://connect?server={server.url}&token={USER_KEY}"
    term: Terminal = terminal_factory("client", link)  # type: ignore[operator]
    term.expect(r"connected to http://127\.0\.0\.1:\d+ ")
    term.expect(r"✓ logged in as user:alice")
    term.sendline("quit")
    assert term.wait() == 0


def test_message_prints_the_task_id_that_continues_it_and_tasks_get_shows_question_and_time(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Against a real `mail server`: the id `message` prints is the one `-tid` continues, and
    `tasks-get` tells tasks apart by their question and start time."""
    (tmp_path / "server").mkdir()
    with keyed_stub_server(tmp_path / "server", ROOT_ALICE_BOB) as real:
        args = ["client", real.base_url, "--api-key", real.keys["alice"]]
        term = Terminal(args, tmp_path, cols=160)
        request.addfinalizer(term.close)
        prompt = r"mail::user:alice@127\.0\.0\.1:\d+> "
        term.expect(prompt, timeout=60)
        term.sendline("message Which room is free on Friday?")
        term.expect(r"│ echo\[alice\]: Which room is free on Friday\?", timeout=60)
        task_id = term.expect(r"\ntask ([0-9a-f-]{36})\n").group(1)
        term.expect(prompt)
        term.sendline(f"message And on Saturday? -tid {task_id} -rf user_response")
        term.expect(r"│ echo\[alice\]: And on Saturday\?", timeout=60)
        assert term.expect(r"\ntask ([0-9a-f-]{36})\n").group(1) == task_id
        term.expect(prompt)
        term.sendline("tasks-get")
        row = term.expect(rf"│ {task_id} │ ([^│]+) │ ([^│]+) │ completed", timeout=30)
        term.expect(prompt)
        term.sendline("exit")
        assert term.wait() == 0
        record = httpx.get(
            f"{real.base_url}/task",
            params={"task_id": task_id},
            headers=auth(real.keys["alice"]),
            timeout=30,
        ).json()
    started = datetime.datetime.fromisoformat(record["start_time"]).astimezone()
    assert row.group(1).strip() == started.strftime("%H:%M:%S"), row.group(0)
    assert row.group(2).strip() == "Which room is free on Friday?", row.group(0)
    # Both messages went to the one task the printed id names.
    datas = [json.loads(e["data"]) for e in record["events"] if e["event"] == "new_message"]
    bodies = [d["extra_data"]["full_message"]["message"]["body"] for d in datas]
    assert "Which room is free on Friday?" in bodies and "And on Saturday?" in bodies, bodies


def test_whoami_after_a_refused_key_says_it_was_refused(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Against a real `mail server`: a wrong key is not "no API key provided", for `whoami`
    as for any other command (`message` said it)."""
    (tmp_path / "server").mkdir()
    with keyed_stub_server(tmp_path / "server", ROOT_ALICE_BOB) as real:
        wrong = "mail_wrong-key-0000000000000000000000"
        term = Terminal(["client", real.base_url, "--api-key", wrong], tmp_path)
        request.addfinalizer(term.close)
        term.expect(r"MAIL client login failed: .*use 'login KEY' to try again", timeout=60)
        term.expect(r"\nmail> ")
        term.sendline("whoami")
        refused = term.expect(r"✗ (.*)(?=\n)").group(1)
        term.expect(r"\nmail> ")
        term.sendline("message hello")  # any command the server refuses for want of a key
        sent = term.expect(r"✗ (.*)(?=\n)").group(1)
        term.expect(r"\nmail> ")
        term.sendline(f"login {real.keys['alice']}")
        term.expect(r"✓ logged in as user:alice")
        term.sendline("logout")
        term.expect(r"\nmail> ")
        term.sendline("login mail_another-wrong-key-000000000000000")
        term.expect(r"✗ MAIL client login failed")
        term.expect(r"\nmail> ")
        term.sendline("whoami")
        again = term.expect(r"✗ (.*)(?=\n)").group(1)
        term.expect(r"\nmail> ")
        term.sendline("logout")
        term.expect(r"\nmail> ")
        term.sendline("whoami")
        none_given = term.expect(r"✗ (.*)(?=\n)").group(1)
        term.sendline("exit")
        assert term.wait() == 0
    for said in (refused, sent, again):
        assert "no API key provided" not in said, said
        assert said.startswith("not logged in: the API key given was refused"), said
        assert "401" in said and "invalid API key" in said, said
    # After a logout no key was given: the server's own words.
    assert none_given == "HTTP 401: no API key provided", none_given


def test_bad_swarm_link_stops_with_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mail.cli", "client", "swarm://connect?token=abc"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "no server parameter" in done.stderr


# ---------------------------------------------------------------------- in-process


class Harness:
    def __init__(self, repl: MAILREPL, runner: asyncio.Runner, out: io.StringIO) -> None:
        self.repl = repl
        self.runner = runner
        self.out = out

    def run(self, line: str) -> str:
        start = self.out.tell()
        self.repl.execute(self.runner, line)
        self.out.seek(start)
        text = self.out.read()
        return text


@pytest.fixture
def harness(server: FakeMailServer) -> Iterator[Harness]:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None, force_terminal=False)
    repl = MAILREPL(server.url, api_key=ADMIN_KEY, config=ClientConfig(), console=console)
    with asyncio.Runner() as runner:
        runner.run(repl.client.login(ADMIN_KEY))
        yield Harness(repl, runner, out)
        runner.run(repl.client.aclose())


def test_prompt_shortens_long_ids(harness: Harness) -> None:
    assert re.fullmatch(r"mail::admin:root@127\.0\.0\.1:\d+> ", harness.repl.prompt)
    harness.run(f"login {USER_KEY}")
    assert "user:alic...6789@" in harness.repl.prompt
    harness.run("logout")
    assert harness.repl.prompt == "mail> "


def test_service_commands(harness: Harness, server: FakeMailServer) -> None:
    assert "pong — mail (protocol 1.3), swarm fake-swarm v1.0.0" in harness.run("ping")
    assert '"protocol_version": "1.3"' in harness.run("p -v")
    assert "fake-swarm is healthy" in harness.run("health")
    assert "is now maintenance" in harness.run("hu maintenance")
    assert server.last("/health").body == {"status": "maintenance"}
    assert "admin:root" in harness.run("me")
    status = harness.run("status")
    assert "fake-swarm (ready)" in status and "active users" in status


def test_message_options_reach_the_server(harness: Harness, server: FakeMailServer) -> None:
    out = harness.run(
        "msg hello world -s Subj -tid t-1 -e weather -rf user_response -se "
        '-k \'{"breakpoint_tool_call_result": {"content": "ok"}}\''
    )
    assert "echo: hello world" in out and "new_message" in out
    assert server.last("/message").body == {
        "subject": "Subj",
        "body": "hello world",
        "msg_type": "request",
        "entrypoint": "weather",
        "task_id": "t-1",
        "resume_from": "user_response",
        "kwargs": {"breakpoint_tool_call_result": {"content": "ok"}},
        "show_events": True,
    }


def test_message_stream_verbose_shows_raw_data(harness: Harness, server: FakeMailServer) -> None:
    server.stream_gate.set()
    out = harness.run("ms 'raw please' -v -tid s-9")
    assert '"response": "echo: raw please"' in out
    assert "line two s-9" in out
    assert server.last("/message").body["stream"] is True


def test_message_interswarm_arguments_land_in_the_right_fields(
    harness: Harness, server: FakeMailServer
) -> None:
    # The original passed these positionally into the wrong parameters and split the
    # targets into characters; here each one lands in its own field.
    out = harness.run("mi 'hello remote' analyst@swarm-b,critic@swarm-c remote-token -t broadcast")
    assert "remote ok" in out
    assert server.last("/interswarm/message").body == {
        "body": "hello remote",
        "user_token": "remote-token",
        "targets": ["analyst@swarm-b", "critic@swarm-c"],
        "msg_type": "broadcast",
    }
    harness.run("mi hi '[\"analyst@swarm-b\"]' -T x@y -T z@w --stream -tid t-5")
    assert server.last("/interswarm/message").body == {
        "body": "hi",
        "user_token": ADMIN_KEY,  # defaults to the session's key
        "targets": ["analyst@swarm-b", "x@y", "z@w"],
        "task_id": "t-5",
        "stream": True,
    }
    assert "give at least one target" in harness.run("mi lonely")


def test_registry_commands(harness: Harness, server: FakeMailServer, tmp_path: Path) -> None:
    assert "fake-swarm" in harness.run("sg")
    assert "registered persistent swarm remote" in harness.run(
        'sr remote http://remote:1 tok -m \'{"team": "b"}\''
    )
    assert server.last("/swarms").body == {
        "name": "remote",
        "base_url": "http://remote:1",
        "auth_token": "tok",
        "volatile": False,
        "metadata": {"team": "b"},
    }
    harness.run("swarm-r temp http://temp:1 -V")
    assert server.last("/swarms").body["volatile"] is True
    assert "dumped swarm fake-swarm" in harness.run("sd")
    assert "loaded swarm inline" in harness.run('sl \'{"name": "inline"}\'')
    swarm_file = tmp_path / "swarm.json"
    swarm_file.write_text(json.dumps({"name": "from-file"}))
    assert "loaded swarm from-file" in harness.run(f"sl @{swarm_file}")
    assert "not valid JSON" in harness.run("sl '{broken'")


def test_task_commands(harness: Harness, server: FakeMailServer) -> None:
    empty = harness.run("tsg")
    assert "no tasks yet" in empty and "task id" not in empty, empty
    harness.run("m remember -tid keep-1")
    listing = harness.run("tsg")
    # One owner (the caller, named by the prompt): no owner column.
    assert "keep-1" in listing and "owner" not in listing, listing
    server.tasks["remote-1"] = {**server.tasks["keep-1"], "task_owner": "user:eve@swarm-b"}
    listing = harness.run("tsg")
    assert "admin:root@fake-swarm" in listing and "user:eve@swarm-b" in listing, listing
    assert "task_owner" in harness.run("tg keep-1")
    assert "✗ HTTP 404: task 'nope' not found" in harness.run("task-get nope")


def test_tasks_get_counts_events_of_summaries(harness: Harness, server: FakeMailServer) -> None:
    # The real GET /tasks sends summaries: event_count instead of the event list.
    server.tasks["summary-1"] = {
        "task_id": "summary-1",
        "task_owner": "admin:root@fake-swarm",
        "is_running": False,
        "completed": True,
        "event_count": 7,
    }
    row = next(line for line in harness.run("tsg").splitlines() if "summary-1" in line)
    assert row.rstrip(" │").endswith("7"), row
    assert "completed" in row, row
    # One state column (waiting for a review, a breakpoint...) instead of two booleans that hide it.
    server.tasks["summary-1"]["state"] = "waiting_for_review"
    listing = harness.run("tsg")
    assert "waiting_for_review" in listing and "False" not in listing, listing


def test_responses_command(harness: Harness, server: FakeMailServer) -> None:
    out = harness.run("r 'Plan tomorrow' '[]' -i 'be brief' --no-ptc")
    assert "planned" in out
    assert server.last("/responses").body == {
        "input": [{"role": "user", "content": "Plan tomorrow"}],
        "tools": [],
        "instructions": "be brief",
        "parallel_tool_calls": False,
    }


def test_an_unknown_option_names_the_command_and_its_usage(harness: Harness) -> None:
    out = harness.run("message --bogus x")
    assert "'message' does not take '--bogus'" in out
    assert "usage: message " in out
    assert "Did you mean '--entrypoint'?" in harness.run("message hi --entrypont sup")


def test_past_events_keep_their_own_time() -> None:
    out = io.StringIO()
    renderer = Renderer(Console(file=out, width=200, color_system=None, force_terminal=False))
    renderer.events(
        [
            {"event": "new_message", "data": {"timestamp": "2020-01-02T03:04:05+00:00"}},
            {"event": "task_complete", "data": '{"timestamp": "2020-01-02T03:04:06+00:00"}'},
        ]
    )
    text = out.getvalue()
    local = datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=datetime.UTC).astimezone()
    assert local.strftime("%Y-%m-%d %H:%M:%S") in text
    assert datetime.datetime.now().strftime("%Y-%m-%d") not in text


def test_errors_are_reported_and_the_loop_survives(harness: Harness) -> None:
    assert "unknown command 'hepl'. Did you mean 'help'?" in harness.run("hepl")
    assert "cannot parse the line" in harness.run('message "unbalanced')
    assert "not valid JSON" in harness.run("m hi -k '{nope'")
    assert "expected a JSON object" in harness.run("m hi -k '[1]'")
    assert "invalid choice: 'sideways'" in harness.run("m hi -rf sideways")
    assert harness.run("   ") == ""
    assert "usage: task-get" in harness.run("tg -h")
    assert "message-interswarm" in harness.run("help")
    assert "BODY TARGETS" in harness.run("? mi") or "targets" in harness.run("? mi")
    # The session still works after all that.
    assert "fake-swarm is healthy" in harness.run("h")


def test_cli_docs_list_every_command_alias_and_subcommand() -> None:
    from mail.cli import COMMANDS as SUBCOMMANDS
    from mail.repl.parser import COMMANDS

    docs = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    for spec in COMMANDS:
        row = next((line for line in docs.splitlines() if line.startswith(f"| `{spec.name}")), None)
        assert row is not None, f"{spec.name} missing from the command table of docs/cli.md"
        for alias in spec.aliases:
            assert f"`{alias}`" in row, f"alias {alias} of {spec.name} missing in docs/cli.md"
    for name, _module, _help in SUBCOMMANDS:
        assert f"\n## `mail {name}`" in docs, f"mail {name} has no section in docs/cli.md"
        assert f"\n| `mail {name}" in docs, f"mail {name} missing from the table of docs/cli.md"


def test_cli_docs_list_every_server_option() -> None:
    from mail.cli import build_parser

    docs = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    section = docs.split("\n## `mail server`", 1)[1].split("\n## ", 1)[0]
    parser = build_parser()
    server = parser._subparsers._group_actions[0].choices["server"]  # type: ignore[union-attr]
    for action in server._actions:
        longs = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
        for option in longs:
            assert re.search(rf"{option}(?![\w-])", section), (
                f"mail server {option} not in docs/cli.md"
            )
