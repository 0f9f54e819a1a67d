"""The documented model tasks against a real OpenAI-compatible server: opt in with

    MAIL_REAL_MODEL_URL=http://127.0.0.1:8080/v1 uv run pytest -m real_model tests/test_real_model.py

(``MAIL_REAL_MODEL_NAME`` names the model, default ``local-model``; ``MAIL_REAL_MODEL_TIMEOUT``
bounds each task, default 300 s). Skipped unless the URL is set, so never part of CI.
scripts/real-model-check.sh starts such a server with a small model and prints the same tasks
as a table (bench/real_model.py), for `mail server` too.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
from pathlib import Path

import pytest

URL = os.environ.get("MAIL_REAL_MODEL_URL", "")
TIMEOUT = float(os.environ.get("MAIL_REAL_MODEL_TIMEOUT", "300"))
MAX_STEPS = 6
BENCH = Path(__file__).resolve().parents[1] / "bench" / "real_model.py"

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not URL, reason="set MAIL_REAL_MODEL_URL to an OpenAI-compatible server"),
]


@functools.cache
def _bench():
    spec = importlib.util.spec_from_file_location("real_model_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.timeout(len(_bench().TASKS) * (TIMEOUT + 60))
async def test_documented_tasks_end_within_their_limits(stream: bool) -> None:
    bench = _bench()
    args = argparse.Namespace(
        url=URL,
        model=os.environ.get("MAIL_REAL_MODEL_NAME", "local-model"),
        max_steps=MAX_STEPS,
        timeout=TIMEOUT,
        max_tokens=None,
        request_timeout=None,
        text_only=False,
        task_list=list(bench.TASKS),
    )
    outcomes = await bench.run_api(args, stream)
    assert len(outcomes) == len(bench.TASKS)
    for outcome in outcomes:
        where = f"{outcome.question!r}: {outcome.subject} {outcome.answer[:200]!r}"
        # Ended (completed, or failed with a reason), by itself: not by the caller's timeout.
        assert outcome.state != "running", where
        assert outcome.subject.startswith("::") and outcome.subject != "::task_timeout::", where
        assert outcome.answer.strip(), where
        assert 1 <= outcome.calls <= MAX_STEPS, where
        assert outcome.tokens > 0, where
