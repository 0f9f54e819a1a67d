"""Every command block of README.md and docs/*.md runs as written against real servers.

Blocks are covered by default; a page marks the ones a reader is not meant to run with
``<!-- docs-test: skip (reason) -->`` (see tests/support/docs_blocks.py for the rules). One
test per page, each with its own scratch folder and servers, started as the page says.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.docs_blocks import parse_page
from tests.support.docs_runner import REPO, PageRunner

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# Pages the issue names: each must actually run something (a marker cannot switch one off).
MUST_RUN = {
    "README.md",
    "quickstart.md",
    "review.md",
    "team-tools.md",
    "stdlib.md",
    "interswarm.md",
    "database.md",
    "console.md",
}

pytestmark = pytest.mark.timeout(300)


def _runnable(page: Path) -> bool:
    return any(
        b.kind in ("shell", "python", "transcript") and not b.skipped for b in parse_page(page)
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_runs_as_written(page: Path, tmp_path: Path, eval_example: object) -> None:
    if not _runnable(page):
        assert page.name not in MUST_RUN, f"{page.name} has no runnable block left"
        pytest.skip("no runnable blocks")
    before = {p.name for p in REPO.iterdir()}
    ran = PageRunner(page, tmp_path, eval_example=eval_example).run()
    # The pages run from scratch folders: nothing (keys, registries, mail_files/) lands in the
    # checkout itself.
    left = {p.name for p in REPO.iterdir()} - before
    assert not left & {"mail_files", "registries", "attachments", "team-files"}, left
    print("\n".join(ran))
    assert ran


def test_every_page_is_collected() -> None:
    names = {p.name for p in PAGES}
    assert MUST_RUN <= names
