"""The REPL's `message -b` (a background message, followed with `-f`) and `-mt` (a strategy
for a message to a running task), in a pty against a real `mail server` on the stub swarm."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.test_repl import Terminal

from server_fixtures import ROOT_ALICE_BOB, keyed_stub_server

pytestmark = pytest.mark.timeout(180)


def test_a_background_message_is_followed_and_a_queued_one_answered(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    (tmp_path / "server").mkdir()
    with keyed_stub_server(tmp_path / "server", ROOT_ALICE_BOB) as real:
        term = Terminal(
            ["client", real.base_url, "--api-key", real.keys["alice"]], tmp_path, cols=160
        )
        request.addfinalizer(term.close)
        prompt = r"mail::user:alice@127\.0\.0\.1:\d+> "
        term.expect(prompt, timeout=60)
        term.sendline("message -b -f SLEEP 0.5 followed")
        task_id = term.expect(r"task ([0-9a-f-]{36}) accepted \(running\)", timeout=60).group(1)
        term.expect(r"echo\[alice\]: followed", timeout=60)
        term.expect(prompt)

        term.sendline("message -b SLEEP 3 first")
        first = term.expect(r"task ([0-9a-f-]{36}) accepted", timeout=60).group(1)
        assert first != task_id
        term.expect(prompt)
        term.sendline(f"message second -tid {first}")
        term.expect(r"409.*still running", timeout=60)
        term.expect(prompt)
        term.sendline(f"message second -tid {first} -mt enqueue")
        term.expect(r"│ echo\[alice\]: second", timeout=60)
        term.expect(prompt)
        term.sendline("exit")
        assert term.wait() == 0
