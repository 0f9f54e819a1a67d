"""Make this installation the operating system's handler for `swarm://` links."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

DESKTOP_FILE_NAME = "mail-swarm.desktop"
MIME_TYPE = "x-scheme-handler/swarm"
TOOL_TIMEOUT_SECONDS = 30

Printer = Callable[[str], None]

# Characters that force quoting of an Exec argument (Desktop Entry Specification, "Exec key").
_EXEC_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")


def launch_command(python: str | None = None) -> list[str]:
    """The program a swarm:// click runs, without the URL: `python -m mail.cli client`.

    Going through the interpreter rather than a `mail` script on PATH avoids starting an
    unrelated program of the same name (many systems ship a `mail` mail reader).
    """
    return [python or sys.executable, "-m", "mail.cli", "client"]


def _exec_arg(arg: str) -> str:
    arg = arg.replace("%", "%%")
    if not any(char in _EXEC_RESERVED for char in arg):
        return arg
    quoted = "".join("\\" + char if char in '"`$\\' else char for char in arg)
    # The key's value is itself a string value, whose own escaping doubles backslashes.
    return '"' + quoted.replace("\\", "\\\\") + '"'


def desktop_entry(python: str | None = None) -> str:
    exec_line = " ".join(_exec_arg(arg) for arg in launch_command(python)) + " %u"
    return "\n".join(
        [
            "[Desktop Entry]",
            "Type=Application",
            "Name=MAIL client",
            "Comment=Open swarm:// links in the MAIL client",
            f"Exec={exec_line}",
            "Terminal=true",
            "NoDisplay=true",
            f"MimeType={MIME_TYPE};",
            "Categories=Network;",
            "",
        ]
    )


def applications_dir(environ: Mapping[str, str]) -> Path:
    data_home = environ.get("XDG_DATA_HOME", "").strip()
    if data_home:
        return Path(data_home) / "applications"
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "share" / "applications"


def _run_tool(argv: list[str], environ: Mapping[str, str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(
            argv,
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    output = (done.stderr or done.stdout or "").strip()
    if done.returncode != 0:
        return False, f"exit status {done.returncode}" + (f": {output}" if output else "")
    return True, output


def register_linux(environ: Mapping[str, str], out: Printer, python: str | None = None) -> int:
    """Write the .desktop file, then associate it with swarm:// through xdg-mime.

    Returns 0 when swarm:// is associated, 1 when any required step could not be done.
    """
    apps = applications_dir(environ)
    desktop_path = apps / DESKTOP_FILE_NAME
    try:
        apps.mkdir(parents=True, exist_ok=True)
        desktop_path.write_text(desktop_entry(python), encoding="utf-8")
    except OSError as exc:
        out(f"✗ Could not write {desktop_path}: {exc}")
        return 1
    out(f"✓ Wrote {desktop_path}")

    search_path = environ.get("PATH", "")
    xdg_mime = shutil.which("xdg-mime", path=search_path)
    manual = f"xdg-mime default {DESKTOP_FILE_NAME} {MIME_TYPE}"
    if xdg_mime is None:
        out("✗ xdg-mime was not found on PATH, so swarm:// is NOT associated yet.")
        out("  Install xdg-utils (e.g. `sudo apt install xdg-utils`) and run:")
        out(f"    {manual}")
        return 1
    ok, detail = _run_tool([xdg_mime, "default", DESKTOP_FILE_NAME, MIME_TYPE], environ)
    if not ok:
        out(f"✗ `{manual}` failed ({detail}); swarm:// is NOT associated.")
        return 1
    out(f"✓ Ran `{manual}`")

    # Refreshing the desktop database only speeds up discovery; it is optional.
    updater = shutil.which("update-desktop-database", path=search_path)
    if updater is None:
        out("• update-desktop-database not found; skipped (optional)")
    else:
        ok, detail = _run_tool([updater, str(apps)], environ)
        if ok:
            out(f"✓ Ran `update-desktop-database {apps}`")
        else:
            out(f"! update-desktop-database failed ({detail}); the association still holds")
    out("swarm:// links now open `mail client` in a terminal.")
    return 0


def macos_instructions(out: Printer, python: str | None = None) -> int:
    command = " ".join(launch_command(python))
    out("macOS registers URL schemes through an application bundle; do it by hand:")
    out("1. Create an app (for example with Script Editor or Platypus) that runs:")
    out(f'     {command} "$URL"')
    out("2. Add this to the app's Contents/Info.plist:")
    for line in (
        "<key>CFBundleURLTypes</key>",
        "<array>",
        "  <dict>",
        "    <key>CFBundleURLName</key><string>MAIL swarm link</string>",
        "    <key>CFBundleURLSchemes</key><array><string>swarm</string></array>",
        "  </dict>",
        "</array>",
    ):
        out(f"     {line}")
    out("3. Move the app to /Applications and open it once so Launch Services sees it.")
    return 0


def windows_instructions(out: Printer, python: str | None = None) -> int:
    exe, *rest = launch_command(python)
    command = f'"{exe}" ' + " ".join(rest) + ' "%1"'
    out("Run these PowerShell commands (per user, no Administrator needed):")
    out("  New-Item -Path 'HKCU:\\Software\\Classes\\swarm' -Force | Out-Null")
    out(
        "  Set-ItemProperty -Path 'HKCU:\\Software\\Classes\\swarm' -Name '(Default)' -Value 'URL:MAIL swarm link'"
    )
    out("  Set-ItemProperty -Path 'HKCU:\\Software\\Classes\\swarm' -Name 'URL Protocol' -Value ''")
    out(
        "  New-Item -Path 'HKCU:\\Software\\Classes\\swarm\\shell\\open\\command' -Force | Out-Null"
    )
    escaped = command.replace("'", "''")
    out(
        "  Set-ItemProperty -Path 'HKCU:\\Software\\Classes\\swarm\\shell\\open\\command' "
        f"-Name '(Default)' -Value '{escaped}'"
    )
    return 0


def register_url_handler(
    system: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    out: Printer = print,
    python: str | None = None,
) -> int:
    """Register (Linux) or explain how to register (macOS, Windows) the swarm:// handler."""
    system = system or platform.system()
    env = os.environ if environ is None else environ
    if system == "Linux":
        return register_linux(env, out, python)
    if system == "Darwin":
        return macos_instructions(out, python)
    if system == "Windows":
        return windows_instructions(out, python)
    out(f"✗ Registering swarm:// is not supported on {system!r}.")
    out(
        f"  Configure your desktop to open swarm:// links with: {' '.join(launch_command(python))} URL"
    )
    return 1
