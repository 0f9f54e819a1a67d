"""Test-wide setup: make `tests.support` importable and keep LiteLLM offline."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TESTS_DIR = Path(__file__).resolve().parent
for path in (str(REPO_ROOT), str(TESTS_DIR)):
    if path not in sys.path:
        sys.path.insert(0, path)

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The console tests' `browser` and `console` fixtures (see that module).
from tests.support.console_harness import browser, console  # noqa: E402, F401


@pytest.fixture(autouse=True)
def _restore_config_path_env() -> Iterator[None]:
    """`mail server --config` / `mail keys --config` set $MAIL_CONFIG_PATH for their run;
    tests that call their config resolvers in-process must not leak it to later tests (a
    server started afterwards without --config would read another test's file)."""
    saved = os.environ.get("MAIL_CONFIG_PATH")
    yield
    if saved is None:
        os.environ.pop("MAIL_CONFIG_PATH", None)
    else:
        os.environ["MAIL_CONFIG_PATH"] = saved
