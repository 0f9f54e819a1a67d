"""Tests for mail.core.help_text: sections of the `help` tool's text and spec lookup."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mail.core import help_text as H
from mail.core.tools import create_help_tool

SECTION = re.compile(r"^===== (.+?) =====$", re.MULTILINE)


def section_titles(text: str) -> list[str]:
    return [t for t in SECTION.findall(text) if not t.startswith("Tool `")]


def test_default_is_summary_only() -> None:
    text = H.build_help_text("weather", "example")
    assert text.startswith("===== SUMMARY =====\n\n")
    assert section_titles(text) == ["SUMMARY"]
    assert text == f"===== SUMMARY =====\n\n{H.SUMMARY_TEXT}"
    assert "send_request" in text and "task_complete" in text


def test_identity_section_exact_lines() -> None:
    text = H.build_help_text("weather", "example", get_summary=False, get_identity=True)
    assert text == (
        "===== YOUR IDENTITY =====\n\n"
        "**Name**: weather\n"
        "**Swarm**: example\n"
        "**Local Address**: weather (same as name)\n"
        "**Interswarm Address**: weather@example"
    )


def test_nothing_selected_gives_empty_text() -> None:
    assert H.build_help_text("a", "s", get_summary=False) == ""


def test_all_sections_in_fixed_order() -> None:
    text = H.build_help_text(
        "math",
        "swarm-1",
        get_summary=True,
        get_identity=True,
        get_tool_help=["task_complete", "send_request"],
        get_full_protocol=True,
        protocol_text="# MAIL spec\nBody of the spec.",
    )
    assert section_titles(text) == [
        "SUMMARY",
        "YOUR IDENTITY",
        "TOOL HELP",
        "FULL MAIL PROTOCOL SPECIFICATION",
    ]
    # Sections are separated by exactly the section layout; the tail is stripped.
    assert "\n\n===== YOUR IDENTITY =====\n\n**Name**: math\n" in text
    assert text.endswith(
        "===== FULL MAIL PROTOCOL SPECIFICATION =====\n\n# MAIL spec\nBody of the spec."
    )
    # Tool blocks follow the requested order.
    assert text.index("===== Tool `task_complete` =====\n") < text.index(
        "===== Tool `send_request` =====\n"
    )


def test_tool_help_has_worked_example_for_every_enum_name() -> None:
    enum = create_help_tool()["function"]["parameters"]["properties"]["get_tool_help"]["items"][
        "enum"
    ]
    assert list(enum) == list(H.TOOL_HELP_NAMES)
    for name in H.TOOL_HELP_NAMES:
        text = H.build_help_text("a", "s", get_summary=False, get_tool_help=[name])
        assert text.startswith(f"===== TOOL HELP =====\n\n===== Tool `{name}` =====\n")
        assert f"{name}(" in text, f"no example call for {name}"
        assert H.TOOL_EXAMPLES[name].strip() in text


def test_tool_help_unknown_name_is_a_note_not_a_failure() -> None:
    text = H.build_help_text("a", "s", get_summary=False, get_tool_help=["teleport"])
    assert "===== Tool `teleport` =====" in text
    assert "No help is available for `teleport`" in text


@pytest.mark.parametrize("value", [None, (), []])
def test_empty_tool_help_omits_section(value: object) -> None:
    text = H.build_help_text("a", "s", get_tool_help=value)  # type: ignore[arg-type]
    assert "TOOL HELP" not in text


def test_full_protocol_without_text_is_one_line_note() -> None:
    text = H.build_help_text("a", "s", get_summary=False, get_full_protocol=True)
    title, _, body = text.partition("\n\n")
    assert title == "===== FULL MAIL PROTOCOL SPECIFICATION ====="
    assert body and "\n" not in body
    assert "not be found" in body


def test_load_protocol_text_walks_up_from_start(tmp_path: Path) -> None:
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "SPEC.md").write_text("# The spec\n", encoding="utf-8")
    deep = tmp_path / "src" / "mail" / "core"
    deep.mkdir(parents=True)
    module_file = deep / "help_text.py"
    module_file.write_text("", encoding="utf-8")
    assert H.load_protocol_text(module_file) == "# The spec\n"
    assert H.load_protocol_text(deep) == "# The spec\n"
    assert H.find_protocol_spec(deep) == tmp_path / "spec" / "SPEC.md"


def test_load_protocol_text_absent_returns_none(tmp_path: Path) -> None:
    start = tmp_path / "a" / "b"
    start.mkdir(parents=True)
    # tmp dirs live under /tmp, which has no spec/SPEC.md above it
    assert H.find_protocol_spec(start) is None
    assert H.load_protocol_text(start) is None


def test_load_protocol_text_ignores_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "SPEC.md").write_text("decoy", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert H.load_protocol_text() != "decoy"
    found = H.find_protocol_spec()
    assert found is None or tmp_path not in found.parents
