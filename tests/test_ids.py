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
