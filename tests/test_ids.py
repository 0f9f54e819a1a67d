"""mail.core.message.new_id: valid, unique version-4 UUIDs, also across threads and forks."""

from __future__ import annotations

import os
import threading
import uuid

from mail.core.message import new_id


def test_ids_are_valid_unique_uuid4() -> None:
    ids = [new_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    for value in ids[:500]:
        parsed = uuid.UUID(value)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == value


def test_threads_never_share_ids() -> None:
    results: list[list[str]] = [[] for _ in range(4)]

    def work(slot: list[str]) -> None:
        slot.extend(new_id() for _ in range(2000))

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for r in results for i in r]
    assert len(set(everything)) == len(everything) == 8000


def test_forked_child_does_not_repeat_the_parents_ids() -> None:
    new_id()  # make sure the parent has a partly used buffer
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.write(write_fd, ",".join(new_id() for _ in range(10)).encode())
        os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    child = set(os.read(read_fd, 10_000).decode().split(","))
    os.close(read_fd)
    parent = {new_id() for _ in range(10)}
    assert len(child) == 10 and not child & parent


def test_task_ids_are_time_ordered_uuid7() -> None:
    """Server-made task ids: valid version 7 UUIDs whose first 48 bits are the time in ms,
    so ids made later sort later (the stores' task-id indexes rely on it for locality)."""
    import time

    from mail.core.message import new_task_id

    before = time.time_ns() // 1_000_000
    first = [new_task_id() for _ in range(2000)]
    after = time.time_ns() // 1_000_000
    assert len(set(first)) == len(first)
    for value in first[:200]:
        parsed = uuid.UUID(value)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == value
        assert before <= parsed.int >> 80 <= after
    # a later millisecond sorts after every id of an earlier one
    while time.time_ns() // 1_000_000 <= after:
        time.sleep(0.001)
    later = new_task_id()
    assert all(later > value for value in first)
