"""The runtime's agent histories keep a per-task index (core/agent_histories.py), so work
done once per finished task reads that task's keys instead of scanning every history."""

from __future__ import annotations

import copy
import pickle
import random

import pytest

from mail.core.agent_histories import AgentHistories
from mail.server.finished_tasks import measure_in_memory


def _index_matches(h: AgentHistories) -> None:
    expected: dict[str, set[str]] = {}
    for key in h:
        task, _, agent = key.partition("::")
        expected.setdefault(task, set()).add(agent)
    assert {t: set(h.agents_of(t)) for t in expected} == expected
    assert h._by_task.keys() == expected.keys()


def test_every_dict_operation_keeps_the_index() -> None:
    rng = random.Random(7)
    h = AgentHistories({"t0::a": []}, **{"t1::b": [{"x": 1}]})
    plain: dict[str, list] = dict(h)
    for _ in range(3000):
        key = f"t{rng.randrange(20)}::{'abc'[rng.randrange(3)]}"
        op = rng.randrange(7)
        if op == 0:
            h[key] = plain[key] = [{"n": rng.random()}]
        elif op == 1 and key in plain:
            del h[key], plain[key]
        elif op == 2:
            assert h.setdefault(key, []) is h[key]
            plain.setdefault(key, h[key])
        elif op == 3:
            assert h.pop(key, None) == plain.pop(key, None)
        elif op == 4:
            h.update({key: []}, **{"t99::z": []})
            plain.update({key: [], "t99::z": []})
        elif op == 5 and plain:
            k, _ = h.popitem()
            plain.pop(k)
        elif op == 6 and rng.random() < 0.02:
            h.clear()
            plain.clear()
        assert dict(h) == plain
    _index_matches(h)
    with pytest.raises(KeyError):
        h.pop("missing::x")


def test_drop_task_and_lookups_touch_only_that_task() -> None:
    h = AgentHistories()
    h["a::one"] = [{"content": "x"}]
    h["a::two"] = []
    h["ab::one"] = []  # a task id that is a prefix of another must not be mixed up
    h["no separator"] = []
    assert h.agents_of("a") == ["one", "two"]
    assert [k for k, _ in h.of_task("ab")] == ["ab::one"]
    h.drop_task("a")
    assert set(h) == {"ab::one", "no separator"}
    assert (h.agents_of("a"), h.agents_of("ab")) == ([], ["one"])


def test_copies_and_pickles_keep_the_type_and_index() -> None:
    h = AgentHistories({"t::a": [{"content": "hi"}]})
    for other in (copy.deepcopy(h), pickle.loads(pickle.dumps(h))):
        assert isinstance(other, AgentHistories)
        assert other == h and other.agents_of("t") == ["a"]


class _Task:
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.events: list = []
        self.response = {"message": {"body": "done"}}
        self.files: dict = {}


class _Runtime:
    def __init__(self, histories: dict) -> None:
        self.agent_histories = histories


class _CountingHistories(AgentHistories):
    """Fails the test if anything iterates over every history."""

    def items(self):  # type: ignore[override]
        raise AssertionError("scanned every history")

    def __iter__(self):  # type: ignore[override]
        raise AssertionError("scanned every history")


def test_measuring_a_finished_task_reads_only_its_own_histories() -> None:
    h = _CountingHistories()
    for i in range(1000):
        h[f"other{i}::agent"] = [{"content": "y" * 10}]
    h["mine::agent"] = [{"content": "x" * 40}]
    size = measure_in_memory(_Task("mine"), _Runtime(h))  # type: ignore[arg-type]
    assert size == 40 + len("done")
    # a plain dict (someone replaced the attribute) is still measured right, by a scan
    plain = {"mine::agent": [{"content": "x" * 40}], "other::agent": [{"content": "y"}]}
    assert measure_in_memory(_Task("mine"), _Runtime(plain)) == 44  # type: ignore[arg-type]
