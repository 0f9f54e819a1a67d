"""Test-wide setup: make `tests.support` importable and keep LiteLLM offline."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TESTS_DIR = Path(__file__).resolve().parent
for path in (str(REPO_ROOT), str(TESTS_DIR)):
    if path not in sys.path:
        sys.path.insert(0, path)

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
