"""Executable documentation, part 2: run one page's blocks the way a reader would.

One ``PageRunner`` per page: a scratch folder that looks like a fresh checkout (the
repository's ``mail.toml`` and ``swarms.json`` as git has them, nothing else), one shell state carried from
block to block (exported variables and the current folder, like one terminal), and the
``mail server`` processes the page starts. What the page says to run is changed only where a
test must: ``uv run X`` runs the synced environment's ``X`` (no re-sync per block; as with
real uv, only inside the checkout or with ``--project``, and plain commands never see that
environment), each
server gets a free port (``localhost:8000`` in the page's text is rewritten to it), and the
keys a server prints on its first start become ``$TOKEN`` (user) and ``$ADMIN_TOKEN``.

Checks: every shell command exits 0, every ``curl`` answer is 2xx/3xx (or the block's
``status=`` marker), every expected-output block matches, every REPL command's output matches
its transcript, and every ``<http://localhost:...>`` link of the page answers.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tests.support.docs_blocks import (
    REPL_PROMPT,
    Block,
    Mismatch,
    match_output,
    match_text,
    parse_page,
    substitute,
)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BLOCK_TIMEOUT = 120.0
STARTUP_TIMEOUT = 120.0

_SERVER_LINE = re.compile(
    r"^\s*(?:uv run(?:\s+--\S+(?:\s+[^-\s]\S*)?)*\s+)?mail server(?P<args>.*)$"
)
_PLACEHOLDER_EXPORT = re.compile(r"^\s*export\s+(?P<name>[A-Z_][A-Z0-9_]*)=\S*\.\.\.")
_URL = re.compile(r"(?:localhost|127\.0\.0\.1):(?P<port>\d{4,5})")
_AUTOLINK = re.compile(r"<(?P<url>http://localhost:\d+/[^>\s]*)>")
_NAMED_URL = re.compile(r"(?<![<\w])(?P<url>http://localhost:\d+(?:/[^\s>]*)?)")
_FENCED = re.compile(r"^ {0,3}```.*?^ {0,3}```", re.S | re.M)
# A documented PostgreSQL URL on localhost becomes the test database.
_DATABASE_URL = re.compile(r"postgresql://[^\s'\"@/]*@localhost(?::5432)?/\w+")
_STATUS = re.compile(r"^DOCS-HTTP-STATUS (\d{3})$", re.M)

PRELUDE = r"""
set -ea  # -a: plain assignments carry to later blocks, as in one terminal
uv() {
  case "$1" in
    run) shift
      local project=
      while [ $# -gt 0 ]; do
        case "$1" in
          --project|--directory) project=1; shift 2 ;;
          --extra|--with|--python) shift 2 ;;
          --*) shift ;;
          *) break ;;
        esac
      done
      # Like uv: outside a project (no pyproject.toml up the tree) and without --project,
      # the checkout's environment is not used, so its commands (`mail`) are not found.
      local d=$PWD
      while [ "$d" != / ] && [ ! -f "$d/pyproject.toml" ]; do d=$(dirname "$d"); done
      if [ -z "$project" ] && [ ! -f "$d/pyproject.toml" ]; then
        "$@"
      else
        PATH="$DOCS_VENV_PATH" "$@"
      fi ;;
    sync) return 0 ;;
    *) echo "docs runner: unsupported uv command: uv $*" >&2; return 64 ;;
  esac
}
curl() { command curl -w '%{stderr}\nDOCS-HTTP-STATUS %{http_code}\n' "$@"; }
"""


class DocsFailure(AssertionError):
    pass


def pristine(repo: Path, name: str) -> bytes:
    """``name`` as git has it (committed, or staged with ``git add``), not the working file:
    a reader following a page in the checkout changes it (webhooks.md's "Try it" appends to
    mail.toml), and the pages must still run from a fresh checkout's files. Outside a git
    checkout the file itself is all there is."""
    try:
        shown = subprocess.run(
            ["git", "-C", str(repo), "show", f":{name}"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return (repo / name).read_bytes()
    return shown.stdout if shown.returncode == 0 else (repo / name).read_bytes()


@dataclass
class Server:
    doc_port: int
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class PageRunner:
    page: Path
    workdir: Path
    eval_example: Any = None  # pytest-examples' EvalExample, runs the Python blocks
    repo: Path = REPO  # the checkout whose files the scratch folder starts from
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    ports: dict[int, int] = field(default_factory=dict)
    servers: dict[int, Server] = field(default_factory=dict)
    bindings: dict[str, str] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = self.workdir / ".docs-state"
        self.state.mkdir(parents=True, exist_ok=True)
        self.home = self.workdir / "checkout"
        self.home.mkdir(exist_ok=True)
        for name in ("mail.toml", "swarms.json", "pyproject.toml"):
            (self.home / name).write_bytes(pristine(self.repo, name))
        shutil.copytree(self.repo / "scripts", self.home / "scripts")
        self.cwd = self.home
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.endswith("_API_KEY")
            and k
            not in (
                "AUTH_ENDPOINT",
                "TOKEN_INFO_ENDPOINT",
                "MAIL_KEYS_FILE",
                "MAIL_SERVER_TEMPLATE",
                "MAIL_CONFIG_PATH",
                "DATABASE_URL",
                "PYTEST_CURRENT_TEST",
            )
        }
        # The reader's shell has no virtualenv on its PATH (plain `python`, `mail` are not the
        # checkout's); only `uv run` in or with a project puts it there.
        outer = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p) != BIN]
        env["PATH"] = os.pathsep.join(outer)
        env["DOCS_VENV_PATH"] = os.pathsep.join([str(BIN), *outer])
        env["HOME"] = str(self.workdir)  # REPL history and the like stay in the scratch folder
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        env["PYTHONUNBUFFERED"] = "1"
        env["COLUMNS"] = "200"  # no wrapping of long REPL lines
        env["DOCS_STATE"] = str(self.state)
        self.env = env

    # ------------------------------------------------------------------ the page

    def run(self) -> list[str]:
        try:
            for block in parse_page(self.page):
                if block.skipped or block.kind in ("data", "output", "repl"):
                    continue
                if block.kind == "file":
                    assert self.cwd is not None
                    (self.cwd / block.markers["file"]).write_text(block.text, encoding="utf-8")
                    continue
                self.ran.append(f"{block.where} {block.kind}")
                try:
                    self._run_block(block)
                except (Mismatch, DocsFailure) as exc:
                    raise DocsFailure(f"{block.where} ({block.kind} block): {exc}") from None
            self._check_links()
        finally:
            self.stop_servers()
        return self.ran

    def _run_block(self, block: Block) -> None:
        if block.kind == "shell":
            self._run_shell(block)
        elif block.kind == "python":
            self._run_python(block)
        elif block.kind == "transcript":
            self._run_transcript(block)

    def map_urls(self, text: str, *, strict: bool = False) -> str:
        """Documented addresses -> this page's servers (``strict``: unknown ports are an error)."""

        def repl(m: re.Match[str]) -> str:
            port = self.ports.get(int(m.group("port")))
            if port is None and strict and m.group("port") != "5432":
                raise DocsFailure(
                    f"{m.group(0)}: no server of this page listens there (the page must start "
                    "one with `mail server` first)"
                )
            return f"127.0.0.1:{port}" if port else m.group(0)

        text = _DATABASE_URL.sub(_test_database_url(), text)
        return _URL.sub(repl, text)

    def _expected(self, block: Block | None) -> str | None:
        return None if block is None else self.map_urls(substitute(block.text, self.bindings))

    # ------------------------------------------------------------------ shell

    def _run_shell(self, block: Block) -> None:
        text = substitute(block.text, self.bindings)
        chunk: list[str] = []
        repl_line: str | None = None
        outputs: list[str] = []
        statuses: list[int] = []
        for line in text.splitlines():
            server = _SERVER_LINE.match(line)
            if server and not line.rstrip().endswith("\\"):
                outputs.append(self._flush(chunk, statuses))
                chunk = []
                self._check_project(line)
                self._check_extras(line, server.group("args"))
                self.start_server(self.map_urls(server.group("args")))
            elif _PLACEHOLDER_EXPORT.match(line):
                name = _PLACEHOLDER_EXPORT.match(line).group("name")  # type: ignore[union-attr]
                if name not in self.env:
                    raise DocsFailure(f"the page leaves ${name} for the reader to fill in")
            elif block.output is not None and block.output.kind == "repl" and " client " in line:
                repl_line = line
            else:
                chunk.append(line)
        outputs.append(self._flush(chunk, statuses))
        del text
        wanted = block.markers.get("status")
        if wanted:
            if not statuses or statuses[-1] != int(wanted):
                raise DocsFailure(f"expected HTTP {wanted}, got {statuses}")
        elif any(s >= 400 for s in statuses):
            raise DocsFailure(f"HTTP answers {statuses}; output:\n{''.join(outputs)}")
        if repl_line is not None and block.output is not None:
            self._run_repl(repl_line, block.output)
        elif block.output is not None:
            match_output(self._expected(block.output) or "", "".join(outputs), self.bindings)

    def _flush(self, lines: list[str], statuses: list[int]) -> str:
        if not any(line.strip() for line in lines):
            return ""
        lines = [self.map_urls(line, strict=True) for line in lines]
        script = self.state / "block.sh"
        script.write_text(
            PRELUDE
            + 'trap \'env -0 > "$DOCS_STATE/env"; pwd > "$DOCS_STATE/cwd"\' EXIT\n'
            + "\n".join(lines)
            + "\n",
            encoding="utf-8",
        )
        try:
            result = subprocess.run(
                ["bash", str(script)],
                cwd=self.cwd,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise DocsFailure(f"did not finish within {BLOCK_TIMEOUT}s: {lines}") from exc
        self._load_state()
        if os.environ.get("DOCS_TEST_VERBOSE"):
            print(f"--- $ {lines}\n{result.stdout}{result.stderr}")
        statuses.extend(int(s) for s in _STATUS.findall(result.stderr))
        if result.returncode != 0:
            raise DocsFailure(
                f"exit status {result.returncode}\n--- commands\n"
                + "\n".join(lines)
                + f"\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
            )
        return result.stdout

    def _load_state(self) -> None:
        env_file, cwd_file = self.state / "env", self.state / "cwd"
        if env_file.exists():
            pairs = [item.split("=", 1) for item in env_file.read_text().split("\0") if item]
            env = {k: v for k, v in (p for p in pairs if len(p) == 2)}
            for noise in ("_", "SHLVL", "OLDPWD", "PWD"):
                env.pop(noise, None)
            self.env = env
        if cwd_file.exists():
            self.cwd = Path(cwd_file.read_text().strip())

    # ------------------------------------------------------------------ servers

    def _check_project(self, line: str) -> None:
        """``uv run mail server`` outside a checkout needs ``--project``, as with real uv."""
        words = line.split()
        if words[:2] != ["uv", "run"] or {"--project", "--directory"} & set(words):
            return
        assert self.cwd is not None
        if not any((d / "pyproject.toml").is_file() for d in (self.cwd, *self.cwd.parents)):
            raise DocsFailure(
                f"`{line.strip()}` runs in {self.cwd}, outside the checkout, without --project: "
                "uv would not find `mail` there"
            )

    @staticmethod
    def _check_extras(line: str, arg_text: str) -> None:
        """``uv run`` installs the project's default dependencies only: cluster mode needs
        ``--extra cluster`` there (the runner's `uv` shim ignores extras, so say it here)."""
        words = line.split()
        if words[:2] != ["uv", "run"] or not _cluster_mode(arg_text):
            return
        if "--all-extras" in words or any(
            a == "--extra" and b == "cluster" for a, b in zip(words, words[1:], strict=False)
        ):
            return
        raise DocsFailure(
            f"`{line.strip()}` asks for cluster mode without `--extra cluster`: in a fresh "
            "checkout `uv run` has no Ray, and the server fails to start"
        )

    def start_server(self, arg_text: str) -> Server:
        if _cluster_mode(arg_text):
            _require_ray()
        args = shlex.split(arg_text, comments=True)
        expanded = [os.path.expandvars(a) for a in args] if args else []
        doc_port = 8000
        for flag in ("--port", "-p"):
            if flag in expanded:
                index = expanded.index(flag)
                doc_port = int(expanded[index + 1])
                del expanded[index : index + 2]
        if doc_port in self.servers:
            self._stop(self.servers.pop(doc_port))
        port = _free_port()
        self.ports[doc_port] = port
        log = self.state / f"server-{doc_port}.log"
        env = dict(self.env)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mail.cli",
                "server",
                *expanded,
                "--port",
                str(port),
                "--host",
                "127.0.0.1",
            ],
            cwd=self.cwd,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        server = Server(doc_port, port, proc, log)
        self.servers[doc_port] = server
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise DocsFailure(f"`mail server{arg_text}` exited:\n{server.output()}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise DocsFailure(f"`mail server{arg_text}` never answered:\n{server.output()}")
            time.sleep(0.1)
        out = server.output()
        for role, var in (("user", "TOKEN"), ("admin", "ADMIN_TOKEN")):
            key = re.search(rf"^\s*{role}\s+key \(id '[^']+'\): (\S+)$", out, re.M)
            if key:
                self.env[var] = key.group(1)
        return server

    def _stop(self, server: Server) -> None:
        if server.proc.poll() is None:
            server.proc.send_signal(signal.SIGINT)
            try:
                server.proc.wait(20)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait(5)

    def stop_servers(self) -> None:
        for server in self.servers.values():
            self._stop(server)

    # ------------------------------------------------------------------ transcripts

    def _run_transcript(self, block: Block) -> None:
        """A ``$ command`` block followed by output lines (server starts are matched on its log)."""
        text = substitute(block.text, self.bindings)
        steps: list[tuple[str, list[str]]] = []
        for line in text.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
        for command, expected_lines in steps:
            server = _SERVER_LINE.match(command)
            if server:
                self._check_project(command)
                self._check_extras(command, server.group("args"))
                started = self.start_server(server.group("args"))
                actual = started.output()
            else:
                actual = self._flush([self.map_urls(command)], [])
            expected = self.map_urls("\n".join(expected_lines))
            if expected.strip():
                match_output(expected, actual, self.bindings)

    def _run_repl(self, command_line: str, transcript: Block) -> None:
        repl = _Repl(self.map_urls(command_line, strict=True), self)
        try:
            steps: list[tuple[str, list[str]]] = []
            for line in transcript.text.splitlines():
                prompt = REPL_PROMPT.match(line)
                if prompt:
                    steps.append((prompt.group("command"), []))
                elif steps:
                    steps[-1][1].append(line)
            repl.read_prompt()
            for command, expected_lines in steps:
                sent = self.map_urls(substitute(command, self.bindings))
                output = repl.send(sent)
                expected = self.map_urls(substitute("\n".join(expected_lines), self.bindings))
                if expected.strip():
                    try:
                        match_output(expected, output, self.bindings)
                    except Mismatch as exc:
                        raise DocsFailure(f"REPL command {sent!r}: {exc}") from None
        finally:
            repl.close()

    # ------------------------------------------------------------------ python

    def _run_python(self, block: Block) -> None:
        from pytest_examples import CodeExample

        source = self.map_urls(substitute(block.text, self.bindings), strict=True)
        example = CodeExample.create(source, path=block.page, start_line=block.line, prefix="py")
        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        out = io.StringIO()
        try:
            os.environ.clear()
            os.environ.update(self.env)
            assert self.cwd is not None
            os.chdir(self.cwd)
            with contextlib.redirect_stdout(out):
                try:
                    if "#> " in source:
                        self.eval_example.run_print_check(example)
                    else:
                        self.eval_example.run(example)
                except Exception as exc:  # reported as text: the example's frames confuse pytest
                    raise DocsFailure(
                        f"{type(exc).__name__}: {exc}\n--- output\n{out.getvalue()}"
                    ) from None
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
            os.chdir(saved_cwd)
        if os.environ.get("DOCS_TEST_VERBOSE"):
            print(f"--- python {block.where}\n{out.getvalue()}")
        if block.output is not None:
            match_output(self._expected(block.output) or "", out.getvalue(), self.bindings)

    # ------------------------------------------------------------------ links

    def _check_links(self) -> None:
        """Every server URL the page names (outside commands) answers: 2xx/3xx, or 401 for a
        route that needs a key. Links (``<http://...>``) must answer 2xx/3xx."""
        named: dict[str, bool] = {}
        for block in parse_page(self.page):
            if block.kind not in ("shell", "python"):
                for m in _NAMED_URL.finditer(block.text):
                    named.setdefault(m.group("url").rstrip(".,;:)`'\""), False)
        prose = _FENCED.sub("", self.page.read_text(encoding="utf-8"))
        for m in _NAMED_URL.finditer(prose):
            named.setdefault(m.group("url").rstrip(".,;:)`'\""), False)
        for m in _AUTOLINK.finditer(prose):
            named[m.group("url")] = True
        for url, strict in named.items():
            if any(mark in url for mark in ("<", "{", "...", "$")):
                continue  # a template for the reader, not an address
            mapped = self.map_urls(url)
            if "localhost" in mapped:
                continue  # no server of this page listens there
            status = httpx.get(mapped, timeout=10, follow_redirects=True).status_code
            if status >= 400 and (strict or status != 401):
                raise DocsFailure(f"{self.page.name}: {url} answers {status}")
            self.ran.append(f"url {url} -> {status}")


class _Repl:
    """``mail client`` driven through pipes: type a command, read until the next prompt."""

    _PROMPT_AT_END = re.compile(r"mail(?:::\S+)?> $")

    def __init__(self, command_line: str, runner: PageRunner) -> None:
        script = runner.state / "repl.sh"
        script.write_text(PRELUDE + command_line + "\n", encoding="utf-8")
        self.proc = subprocess.Popen(
            ["bash", str(script)],
            cwd=runner.cwd,
            env=runner.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.buffer = b""
        self.lock = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := os.read(self.proc.stdout.fileno(), 65536):
            with self.lock:
                self.buffer += chunk
                self.lock.notify_all()
        with self.lock:
            self.lock.notify_all()

    def read_prompt(self, timeout: float = BLOCK_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        with self.lock:
            while not self._PROMPT_AT_END.search(self.buffer.decode(errors="replace")):
                if self.proc.poll() is not None and not self.reader.is_alive():
                    raise DocsFailure(f"the REPL exited: {self.buffer.decode(errors='replace')}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DocsFailure(f"no prompt from the REPL: {self.buffer.decode()!r}")
                self.lock.wait(min(remaining, 0.5))
            text = self.buffer.decode(errors="replace")
            self.buffer = b""
        return self._PROMPT_AT_END.sub("", text)

    def send(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()
        return self.read_prompt()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _cluster_mode(arg_text: str) -> bool:
    args = shlex.split(arg_text, comments=True)
    if "--cluster" not in args:
        return False
    index = args.index("--cluster")
    return index + 1 < len(args) and args[index + 1] != "none"


def _require_ray() -> None:
    """A page that starts a cluster-mode server needs Ray (``uv sync --extra cluster``): it
    is skipped without it, or fails with ``MAIL_REQUIRE_RAY=1`` (CI), as the cluster tests."""
    import importlib.util

    if importlib.util.find_spec("ray") is not None:
        return
    if os.environ.get("MAIL_REQUIRE_RAY") == "1":
        raise DocsFailure("Ray is required (uv sync --extra cluster) but not installed")
    import pytest

    pytest.skip("Ray not installed (uv sync --extra cluster; MAIL_REQUIRE_RAY=1 fails instead)")


def _test_database_url() -> str:
    return os.environ.get("MAIL_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


__all__ = ["DocsFailure", "PageRunner", "match_text"]
