"""The README's Python example runs as written (offline, demo model, no API keys)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(120)


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_python_example_runs_offline() -> None:
    blocks = _python_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    assert blocks, "README has no python example"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    result = subprocess.run(
        [sys.executable, "-c", blocks[0]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert result.returncode == 0, result.stderr
    # The demo swarm delegates the arithmetic to its math agent: 12 * 7 = 84.
    assert "84" in result.stdout, result.stdout


def test_readme_names_the_two_setup_commands() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "uv run mail server" in text
    assert "uv run --extra cluster pytest" in text
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    # CI runs the README's test command.
    assert "run --extra cluster pytest" in ci
