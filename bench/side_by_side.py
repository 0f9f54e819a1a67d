"""Two kinds of request compared on two servers that run at the same time on one CPU.

Used by `bench/http.py` for the cost of ``Idempotency-Key`` (not a script of its own).

Why: this VM's speed moves by a fifth within seconds, so two kinds measured one after the
other on one server (however finely interleaved) differ by as much in an A/A comparison as
the few percent being measured. Here two identical servers share one CPU, each loaded by a
client process of its own (pinned to another CPU), one sent kind A and the other kind B,
at the same time: whatever the machine does to one server's CPU time in a round, it does to
the other's. The kinds swap servers every round (a server's own luck, its file's layout or
its memory, cancels out), and the ratio is that of the CPU time per request summed over the
rounds, with a 90% bootstrap interval over the rounds. An A/A run (both servers sent kind A)
shows how far the method strays when there is no difference.

Linux only for the pinning (``os.sched_setaffinity``); elsewhere, or on one CPU, the servers
and clients run where the scheduler puts them, which is noisier, and the output says so.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class Server(Protocol):
    url: str

    def cpu_seconds(self) -> float: ...


# The CPU the two servers share and the one their clients use (`pinning`).
SERVER_CPU = 0
CLIENT_CPU = 1


def pinning() -> bool:
    """Whether this process may pin its children to CPUs 0 and 1 (Linux, two CPUs or more)."""
    if not hasattr(os, "sched_getaffinity"):
        return False
    allowed = os.sched_getaffinity(0)
    return SERVER_CPU in allowed and CLIENT_CPU in allowed


def on_cpu(cpu: int) -> Callable[[], None] | None:
    """A `preexec_fn` that pins a child process (and every thread it starts) to `cpu`."""
    if not pinning():
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


@dataclass
class Paired:
    """CPU seconds per request of kind A and kind B, one pair per round."""

    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)

    def ratio(self) -> float:
        """B's CPU per request over A's, summed over the rounds (each round weighs alike)."""
        return sum(self.b) / sum(self.a)

    def interval(self, draws: int = 2000) -> tuple[float, float]:
        """A 90% bootstrap interval of `ratio` over the rounds (fixed seed: the same numbers
        print the same)."""
        pick = random.Random(0).choices
        rounds = range(len(self.a))
        ratios = []
        for _ in range(draws):
            chosen = pick(rounds, k=len(self.a))
            ratios.append(sum(self.b[i] for i in chosen) / sum(self.a[i] for i in chosen))
        ratios.sort()
        return ratios[draws // 20], ratios[draws - 1 - draws // 20]

    def round_ratios(self) -> list[float]:
        return [b / a for a, b in zip(self.a, self.b, strict=True)]

    def summary(self) -> str:
        low, high = self.interval()
        spread = self.round_ratios()
        return (
            f"{100 * (self.ratio() - 1):+.1f}% (90% interval {100 * (low - 1):+.1f}% to "
            f"{100 * (high - 1):+.1f}%; rounds {100 * (min(spread) - 1):+.1f}% to "
            f"{100 * (max(spread) - 1):+.1f}%, median {100 * (statistics.median(spread) - 1):+.1f}%)"
        )


def compare(
    servers: Sequence[Server],
    client: Callable[[str, str], list[str]],
    kinds: tuple[str, str],
    rounds: int,
    requests: int,
) -> Paired:
    """`rounds` rounds of `requests` requests to each of the two `servers` at once, kind A to
    one and kind B to the other (swapped every round); `client(url, kind)` is the command of
    a client process sending them. The servers must be pinned to `SERVER_CPU` already."""
    first, second = servers
    paired = Paired()
    for number in range(rounds):
        kind_first, kind_second = kinds if number % 2 == 0 else kinds[::-1]
        before = first.cpu_seconds(), second.cpu_seconds()
        procs = [
            subprocess.Popen(client(server.url, kind), preexec_fn=on_cpu(CLIENT_CPU))
            for server, kind in ((first, kind_first), (second, kind_second))
        ]
        failed = [proc.args for proc in procs if proc.wait() != 0]
        if failed:
            raise RuntimeError(f"a client process failed: {failed}")
        spent = [
            (server.cpu_seconds() - start) / requests
            for server, start in zip((first, second), before, strict=True)
        ]
        by_kind: dict[str, list[float]] = {}
        for kind, cpu in ((kind_first, spent[0]), (kind_second, spent[1])):
            by_kind.setdefault(kind, []).append(cpu)
        if kinds[0] == kinds[1]:  # A/A: "B" is the second server in even rounds, the first in odd
            a, b = (spent[0], spent[1]) if number % 2 == 0 else (spent[1], spent[0])
        else:
            a, b = by_kind[kinds[0]][0], by_kind[kinds[1]][0]
        paired.a.append(a)
        paired.b.append(b)
    return paired


def describe_pinning() -> str:
    if pinning():
        return f"both servers pinned to CPU {SERVER_CPU}, their clients to CPU {CLIENT_CPU}"
    return "NOT pinned (needs Linux and two CPUs): noisier than the method intends"
