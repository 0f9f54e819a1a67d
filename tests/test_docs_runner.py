"""The executable-docs runner itself: it fails when a documented command or answer is wrong.

A scratch copy of quickstart.md with one command broken must fail; markers and placeholders
behave as documented in tests/support/docs_blocks.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from tests.support.docs_blocks import Mismatch, match_output, parse_page
from tests.support.docs_runner import REPO, DocsFailure, PageRunner

pytestmark = pytest.mark.timeout(240)


def _scratch_copy(tmp_path: Path, old: str, new: str) -> Path:
    text = (REPO / "docs" / "quickstart.md").read_text(encoding="utf-8")
    assert old in text
    page = tmp_path / "quickstart.md"
    page.write_text(text.replace(old, new, 1), encoding="utf-8")
    return page


@pytest.mark.parametrize(
    ("old", "new", "complaint"),
    [
        # a route that does not exist: the curl answer is a 404
        ("http://localhost:8000/whoami", "http://localhost:8000/whoareyou", "HTTP answers"),
        # a command that does not exist: the shell fails
        ("uv run mail ping http", "uv run mail pong http", "exit status"),
    ],
    ids=["wrong-route", "wrong-command"],
)
def test_a_broken_command_fails_the_page(
    tmp_path: Path, eval_example: object, old: str, new: str, complaint: str
) -> None:
    page = _scratch_copy(tmp_path, old, new)
    with pytest.raises(DocsFailure, match=complaint):
        PageRunner(page, tmp_path / "run", eval_example=eval_example).run()


def test_a_wrong_documented_answer_fails_the_page(tmp_path: Path, eval_example: object) -> None:
    page = _scratch_copy(
        tmp_path, '{"id": "user", "role": "user"', '{"id": "user", "role": "admin"'
    )
    with pytest.raises(DocsFailure, match="expected 'admin'"):
        PageRunner(page, tmp_path / "run", eval_example=eval_example).run()


def test_markers_and_outputs_are_parsed(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- docs-test: skip (needs a real key) -->\n```bash\nexport X=1\n```\n\n"
        '```bash\ncurl http://localhost:8000/\n```\n\n```json\n{"a": 1}\n```\n\n'
        "<!-- docs-test: file=swarms.json -->\n```json\n[]\n```\n\n```toml\nx = 1\n```\n",
        encoding="utf-8",
    )
    blocks = parse_page(page)
    assert [b.kind for b in blocks] == ["shell", "shell", "output", "file", "data"]
    assert blocks[0].skipped and blocks[1].output is blocks[2]
    assert blocks[3].markers == {"file": "swarms.json"}
    page.write_text("<!-- docs-test: skip -->\n```bash\ntrue\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="without a reason"):
        parse_page(page)


def test_placeholders_bind_and_ellipses_match_anything() -> None:
    bindings: dict[str, str] = {}
    match_output(
        '{"id": "call_ff4a...", "body": "Hello ...", "n": 1}',
        '{"id": "call_123abc", "body": "Hello world", "n": 1, "extra": true}',
        bindings,
    )
    assert bindings == {"call_ff4a...": "call_123abc"}
    with pytest.raises(Mismatch):
        match_output('{"id": "call_ff4a..."}', '{"id": "call_other"}', bindings)
    with pytest.raises(Mismatch):
        match_output("line one\n...\nline three", "line one\nline 2\nline four", {})


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def test_pages_start_from_the_files_git_has_not_the_edited_ones(tmp_path: Path) -> None:
    """A reader's walkthrough in the checkout (webhooks.md appends to mail.toml) does not leak
    into the pages' scratch folders."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "scripts", checkout / "scripts")
    for name in ("mail.toml", "swarms.json", "pyproject.toml"):
        (checkout / name).write_bytes((REPO / name).read_bytes())
    _git(checkout, "init", "-q")
    _git(checkout, "add", ".")
    _git(checkout, "commit", "-q", "-m", "fresh")
    committed = (checkout / "mail.toml").read_bytes()
    with (checkout / "mail.toml").open("a") as toml:
        toml.write("\n[server.webhooks]\nallowed_hosts = ['127.0.0.1']\n")
    page = tmp_path / "page.md"
    page.write_text("```bash\ntrue\n```\n", encoding="utf-8")
    runner = PageRunner(page, tmp_path / "run", repo=checkout)
    assert (runner.home / "mail.toml").read_bytes() == committed


def test_the_block_that_edits_mail_toml_can_be_run_twice(
    tmp_path: Path, eval_example: object
) -> None:
    """webhooks.md's "Try it" appends to mail.toml: run twice, the server still starts and the
    table is there once."""
    (edit,) = [
        b
        for b in parse_page(REPO / "docs" / "webhooks.md")
        if "mail.toml" in b.text and b.kind == "shell"
    ]
    fenced = f"```bash\n{edit.text}```\n\n"
    page = tmp_path / "twice.md"
    page.write_text(
        fenced
        + fenced
        + "```bash\ntest \"$(grep -c '^\\[server.webhooks\\]' mail.toml)\" = 1\n```\n\n"
        + "```bash\nuv run mail server\n```\n\n"
        + "```bash\ncurl -s http://localhost:8000/health\n```\n",
        encoding="utf-8",
    )
    ran = PageRunner(page, tmp_path / "run", eval_example=eval_example).run()
    assert len(ran) == 5, ran
