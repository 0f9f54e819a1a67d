"""``[server.settings] idempotency_key_ttl`` is a finite number of seconds.

TOML has ``inf``, and the setting took it: keys then never expired, and a caller at
``max_idempotency_keys_per_caller`` whose keys were all under way got a 500 (the 429's
``Retry-After``, at most the TTL, could not be computed) instead of the documented 429.
A server refuses to start with it, naming the setting, as for any other bad value.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from server_fixtures import ServerProcess, free_port, write_config, write_stub_swarms

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_a_server_refuses_a_key_ttl_that_is_not_finite(tmp_path: Path, value: str) -> None:
    write_stub_swarms(tmp_path)
    port = free_port()
    config = write_config(tmp_path, port=port, extra=f"idempotency_key_ttl = {value}\n")
    server = ServerProcess(tmp_path, port, args=["--config", str(config)])
    server.start(wait=False)
    try:
        code = server.wait_exit(30)
    finally:
        server.stop()
    assert code != 0, server.logs()
    assert "idempotency_key_ttl" in server.logs()
