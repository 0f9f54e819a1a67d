"""What a store costs per task, kept cheap without changing what is stored (issue 30).

The runtime reports about twenty changes per task to its store; these tests pin the shortcuts
that made them cheap to the results the plain ways give.
"""

from __future__ import annotations

import datetime
import json
import random
import time
from typing import Any

import pytest

from mail.core.events import MessageText, TaskEvent, utc_iso
from mail.core.message import build_mail_xml
from support.scripted_agents import (
    user_message,
)

# ------------------------------------------------------------------------------ timestamps


def _iso(ns: int) -> str:
    second, rest = divmod(ns, 1_000_000_000)
    start = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (start + datetime.timedelta(seconds=second, microseconds=rest // 1000)).isoformat()


def test_event_timestamps_read_as_datetime_writes_them() -> None:
    rng = random.Random(30)
    now = time.time_ns()
    samples = [0, 999, 1000, 10**9, 10**9 + 999_999_999, now, now - now % 10**9]
    samples += [rng.randrange(0, 4 * 10**18) for _ in range(20_000)]
    samples += [now + rng.randrange(0, 3 * 10**9) for _ in range(2_000)]  # one cached second
    for ns in samples:
        assert utc_iso(ns) == _iso(ns), ns
    event = TaskEvent("e", "t", "d")
    parsed = datetime.datetime.fromisoformat(event.timestamp)
    assert abs(parsed.timestamp() - time.time()) < 60 and parsed.utcoffset() == datetime.timedelta(
        0
    )


# --------------------------------------------------------------------------- stored events


def _message() -> Any:
    return user_message("t1", "a body with <xml> and ünïcode")


def test_a_message_event_is_stored_as_the_lazy_description_stored_it() -> None:
    message = _message()
    prefix = "sending message:\n"
    quick = TaskEvent("new_message", "t1", MessageText(prefix, message), {"full_message": message})
    plain = TaskEvent(
        "new_message",
        "t1",
        lambda: prefix + build_mail_xml(message)["content"],
        {"full_message": message},
        timestamp=quick.timestamp,
    )
    assert quick.store_data() == plain.store_data()
    stored = json.loads(quick.store_data())
    assert stored["description"] == prefix and stored["description_xml"] is True
    assert quick.description == plain.description  # what streams and GET /task show
    again = TaskEvent.from_record({"event": "new_message", "data": quick.store_data(), "id": "1"})
    assert again.description == plain.description
    assert json.loads(again.data) == json.loads(plain.data)


def test_a_stored_message_that_cannot_render_keeps_its_prefix() -> None:
    data = {
        "timestamp": "2026-01-01T00:00:00+00:00",
        "description": "sending message:\n",
        "task_id": "t1",
        "extra_data": {"full_message": {"message": {}}},
        "description_xml": True,
    }
    event = TaskEvent.from_record({"event": "new_message", "data": json.dumps(data), "id": "1"})
    assert event.description == "sending message:\n"


pytestmark = pytest.mark.timeout(60)
