"""A scaled-down run of bench/load.py: ~100 mixed POST /message from 4 users over 16
kept-alive connections against a real `mail server`; no errors, no crossed answers, no lost
tasks."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import pytest

from server_fixtures import (
    REPO_ROOT,
    ServerProcess,
    create_key,
    free_port,
    write_config,
    write_stub_swarms,
)

pytestmark = pytest.mark.timeout(300)


def _load_bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_load", REPO_ROOT / "bench" / "load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_mixed_load_loses_and_crosses_nothing(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load_bench()
    write_stub_swarms(tmp_path)
    port = free_port()
    config = write_config(tmp_path, port=port, extra="print_llm_streams = false\n")
    keys_file = tmp_path / "registries" / "keys.json"
    keys = {f"user{i}": create_key(keys_file, "user", f"user{i}") for i in range(4)}
    server = ServerProcess(tmp_path, port, args=["--config", str(config)]).start(wait=False)
    server.wait_healthy(timeout=120)  # generous: CI machines may be busy
    try:
        report = asyncio.run(bench.run_load(server.base_url, keys, total=100, connections=16))  # type: ignore[attr-defined]
    finally:
        assert server.stop() == 0, server.logs()[-3000:]
    with capsys.disabled():
        print(f"\n[load] {report.summary()}")
    assert report.errors == []
    assert report.requests == 100
    assert set(report.by_kind) == {"plain", "stream", "multi", "breakpoint", "drop"}
    assert report.crossed == []
    assert report.lost == []
    assert "Traceback" not in server.logs()
