"""A caller's books keep their byte total as tasks come and go (server/finished_tasks.py):
the quota check on every message reads it instead of summing every stored task."""

from __future__ import annotations

import random
import time

import pytest
from fastapi import HTTPException

from mail.server.finished_tasks import CallerBooks, StorageQuota, TaskSizes
from mail.server.messaging import check_stored


def test_the_total_follows_every_change() -> None:
    rng = random.Random(3)
    sizes = TaskSizes()
    plain: dict[str, int] = {}
    for _ in range(5000):
        task = f"t{rng.randrange(50)}"
        op = rng.randrange(6)
        if op == 0:
            sizes[task] = plain[task] = rng.randrange(10_000)
        elif op == 1:
            assert sizes.pop(task, None) == plain.pop(task, None)
        elif op == 2 and task in plain:
            del sizes[task], plain[task]
        elif op == 3:
            extra = {task: rng.randrange(100), "u": 7}
            sizes.update(extra)
            plain.update(extra)
        elif op == 4 and plain:
            key, _ = sizes.popitem()
            plain.pop(key)
        elif op == 5:
            sizes.setdefault(task, 5)
            plain.setdefault(task, 5)
        assert sizes.bytes == sum(plain.values()) and dict(sizes) == plain
    sizes.clear()
    assert sizes.bytes == 0


def test_the_check_reads_the_total_without_summing_the_tasks() -> None:
    quota = StorageQuota(max_bytes=20_000_000, max_tasks=100_000)
    owner = ("user", "alice")
    for i in range(20_000):
        quota.record(owner, f"t{i}", 900)
    books = quota.books(owner)
    assert isinstance(books, CallerBooks) and books.total == 18_000_000
    started = time.perf_counter()
    for _ in range(2000):
        check_stored(quota, books, new_task=True, incoming=10)
    per_check = (time.perf_counter() - started) / 2000
    # summing 20,000 sizes per check took ~90 us; the kept total ~0.5 us
    assert per_check < 15e-6, f"{per_check * 1e6:.0f} us per check with 20,000 tasks"
    with pytest.raises(HTTPException) as refused:
        check_stored(quota, books, new_task=False, incoming=2_000_001)
    assert refused.value.status_code == 429
    quota.forget(owner, [f"t{i}" for i in range(5000)])
    assert books.total == 13_500_000
    check_stored(quota, books, new_task=False, incoming=2_000_001)  # room again
