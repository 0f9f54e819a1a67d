"""`mail register`: the .desktop file and xdg-mime call on Linux, printed steps elsewhere."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mail.register import DESKTOP_FILE_NAME, desktop_entry, register_url_handler

RECORDER = """#!/bin/sh
echo "${{0##*/}} $*" >> "{log}"
{extra}
"""


def _tool(bin_dir: Path, name: str, log: Path, extra: str = "exit 0") -> None:
    path = bin_dir / name
    path.write_text(RECORDER.format(log=log, extra=extra))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    return {
        "bin": bin_dir,
        "data": tmp_path / "data",
        "log": tmp_path / "calls.log",
        "home": tmp_path,
    }


def _run(environ: dict[str, str], python: str = "/usr/bin/python3") -> tuple[int, list[str]]:
    lines: list[str] = []
    code = register_url_handler("Linux", environ=environ, out=lines.append, python=python)
    return code, lines


def test_linux_writes_desktop_file_and_calls_xdg_tools(sandbox: dict[str, Path]) -> None:
    _tool(sandbox["bin"], "xdg-mime", sandbox["log"])
    _tool(sandbox["bin"], "update-desktop-database", sandbox["log"])
    env = {
        "PATH": str(sandbox["bin"]),
        "XDG_DATA_HOME": str(sandbox["data"]),
        "HOME": "/nonexistent",
    }
    code, lines = _run(env)
    assert code == 0
    desktop = sandbox["data"] / "applications" / DESKTOP_FILE_NAME
    text = desktop.read_text()
    assert "Exec=/usr/bin/python3 -m mail.cli client %u\n" in text
    assert "MimeType=x-scheme-handler/swarm;\n" in text
    assert "Terminal=true\n" in text
    calls = sandbox["log"].read_text().splitlines()
    assert calls == [
        "xdg-mime default mail-swarm.desktop x-scheme-handler/swarm",
        f"update-desktop-database {sandbox['data'] / 'applications'}",
    ]
    assert lines[0] == f"✓ Wrote {desktop}"
    assert "✓ Ran `xdg-mime default mail-swarm.desktop x-scheme-handler/swarm`" in lines
    assert any(line.startswith("✓ Ran `update-desktop-database") for line in lines)


def test_missing_xdg_mime_is_reported_with_the_manual_command(sandbox: dict[str, Path]) -> None:
    env = {"PATH": str(sandbox["bin"]), "XDG_DATA_HOME": str(sandbox["data"])}
    code, lines = _run(env)
    assert code == 1
    assert (sandbox["data"] / "applications" / DESKTOP_FILE_NAME).is_file()
    output = "\n".join(lines)
    assert "xdg-mime was not found on PATH, so swarm:// is NOT associated" in output
    assert "xdg-mime default mail-swarm.desktop x-scheme-handler/swarm" in output
    assert not sandbox["log"].exists()


def test_failing_xdg_mime_is_an_error(sandbox: dict[str, Path]) -> None:
    _tool(sandbox["bin"], "xdg-mime", sandbox["log"], extra="echo boom >&2; exit 3")
    env = {"PATH": str(sandbox["bin"]), "XDG_DATA_HOME": str(sandbox["data"])}
    code, lines = _run(env)
    assert code == 1
    assert any("failed (exit status 3: boom)" in line for line in lines)


def test_missing_update_desktop_database_is_optional(sandbox: dict[str, Path]) -> None:
    _tool(sandbox["bin"], "xdg-mime", sandbox["log"])
    env = {"PATH": str(sandbox["bin"]), "XDG_DATA_HOME": str(sandbox["data"])}
    code, lines = _run(env)
    assert code == 0
    assert "• update-desktop-database not found; skipped (optional)" in lines


def test_default_data_dir_is_under_home(sandbox: dict[str, Path]) -> None:
    _tool(sandbox["bin"], "xdg-mime", sandbox["log"])
    env = {"PATH": str(sandbox["bin"]), "HOME": str(sandbox["home"])}
    code, _ = _run(env)
    assert code == 0
    assert (sandbox["home"] / ".local/share/applications" / DESKTOP_FILE_NAME).is_file()


def test_unwritable_data_dir_is_reported(sandbox: dict[str, Path]) -> None:
    blocker = sandbox["home"] / "file-not-dir"
    blocker.write_text("")
    code, lines = _run({"PATH": "", "XDG_DATA_HOME": str(blocker)})
    assert code == 1
    assert lines[0].startswith("✗ Could not write")


def test_exec_line_quotes_awkward_interpreter_paths() -> None:
    entry = desktop_entry('/opt/my python/bin/py$thon"3')
    assert 'Exec="/opt/my python/bin/py\\\\$thon\\\\"3" -m mail.cli client %u' in entry
    assert "Exec=/x/100%%/python -m mail.cli client %u" in desktop_entry("/x/100%/python")


@pytest.mark.parametrize(
    ("system", "expected"),
    [("Darwin", "CFBundleURLSchemes"), ("Windows", "HKCU:\\Software\\Classes\\swarm")],
)
def test_other_systems_print_manual_steps(system: str, expected: str) -> None:
    lines: list[str] = []
    assert register_url_handler(system, environ={}, out=lines.append, python="/py") == 0
    output = "\n".join(lines)
    assert expected in output and "mail.cli client" in output


def test_unknown_system_is_an_error() -> None:
    lines: list[str] = []
    assert register_url_handler("Plan9", environ={}, out=lines.append) == 1
    assert "not supported on 'Plan9'" in lines[0]


def test_mail_register_command(sandbox: dict[str, Path]) -> None:
    _tool(sandbox["bin"], "xdg-mime", sandbox["log"])
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_DATA_HOME",)}
    env.update(PATH=str(sandbox["bin"]), XDG_DATA_HOME=str(sandbox["data"]))
    done = subprocess.run(
        [sys.executable, "-m", "mail.cli", "register"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✓ Ran `xdg-mime default mail-swarm.desktop x-scheme-handler/swarm`" in done.stdout
    text = (sandbox["data"] / "applications" / DESKTOP_FILE_NAME).read_text()
    assert f"Exec={sys.executable} -m mail.cli client %u" in text
