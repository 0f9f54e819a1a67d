"""Probes of remote swarms' public endpoints: periodic health checks, `GET /`, `GET /swarms`."""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from mail.net.answers import (
    MAX_PEER_INFO_BYTES,
    MAX_SWARM_LIST_BYTES,
    AnswerTooLarge,
    read_at_most,
    read_capped,
)
from mail.net.types import InterswarmError, SwarmEndpoint
from mail.utils.text import loads_valid

logger = logging.getLogger("mail.net.health")

# A failing endpoint waits interval * 2**(failures-1) between checks, at most this many
# intervals, so it is noticed again within a few intervals once it comes back.
MAX_BACKOFF_INTERVALS = 4
# An on-demand re-check (a send to a peer marked inactive) waits at most this long for the
# peer's /health (or health_check_timeout, if shorter): the send it delays is someone's.
RECHECK_TIMEOUT = 5.0
# A failed re-check is the answer for this long: a dead peer costs one probe per second,
# however many sends try it.
RECHECK_COOLDOWN = 1.0


@dataclass
class _Backoff:
    failures: int = 0
    next_due: float = 0.0


class HealthMonitor:
    """Runs health-check passes over the endpoints returned by `get_endpoints`."""

    def __init__(
        self,
        get_endpoints: Callable[[], list[SwarmEndpoint]],
        get_session: Callable[[], Awaitable[aiohttp.ClientSession]],
        interval: float,
        timeout: float,
        on_down: Callable[[str, str], None] | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("health_check_interval must be positive")
        if timeout <= 0:
            raise ValueError("health_check_timeout must be positive")
        self._get_endpoints = get_endpoints
        self._get_session = get_session
        self.interval = interval
        self.timeout = timeout
        self._backoff: dict[str, _Backoff] = {}
        self._task: asyncio.Task[None] | None = None
        # Called with (swarm name, problem) when an active endpoint fails its check.
        self._on_down = on_down
        # On-demand re-checks under way (one per swarm) and the last failed one's outcome.
        self._rechecks: dict[str, asyncio.Task[str | None]] = {}
        self._failed_recheck: dict[str, tuple[float, str]] = {}
        self._last_problem: dict[str, str] = {}

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self.running:
            return
        self._task = asyncio.create_task(self._loop(), name="mail-registry-health-checks")

    async def stop(self) -> None:
        rechecks = list(self._rechecks.values())
        for probe in rechecks:
            probe.cancel()
        await asyncio.gather(*rechecks, return_exceptions=True)
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # Re-raise only if *we* are being cancelled, not because we cancelled the loop.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug in one pass must not end monitoring for the server's lifetime.
                logger.exception("health check pass failed")
            await asyncio.sleep(self.interval)

    async def run_pass(self, *, force: bool = False) -> None:
        """Check every endpoint that is due (all of them when `force`)."""
        now = time.monotonic()
        due = [
            endpoint
            for endpoint in self._get_endpoints()
            if force or self._backoff.get(endpoint["swarm_name"], _Backoff()).next_due <= now
        ]
        if not due:
            return
        session = await self._get_session()
        async with asyncio.TaskGroup() as group:
            for endpoint in due:
                group.create_task(self.check(endpoint, session))

    async def recheck(self, endpoint: SwarmEndpoint) -> str | None:
        """Check an inactive endpoint now; None when it answered, else what went wrong."""
        name = endpoint["swarm_name"]
        probe = self._rechecks.get(name)
        if probe is None:
            failed = self._failed_recheck.get(name)
            if failed is not None and time.monotonic() - failed[0] < RECHECK_COOLDOWN:
                return failed[1]
            probe = asyncio.create_task(self._recheck(endpoint), name=f"mail-recheck-{name}")
            self._rechecks[name] = probe
            probe.add_done_callback(lambda _done: self._rechecks.pop(name, None))
        # Shielded: one caller giving up must not cancel the probe the others wait on.
        return await asyncio.shield(probe)

    async def _recheck(self, endpoint: SwarmEndpoint) -> str | None:
        name = endpoint["swarm_name"]
        session = await self._get_session()
        timeout = min(self.timeout, RECHECK_TIMEOUT)
        if await self.check(endpoint, session, timeout=timeout):
            self._failed_recheck.pop(name, None)
            return None
        problem = self._last_problem.get(name, "health check failed")
        self._failed_recheck[name] = (time.monotonic(), problem)
        return problem

    async def check(
        self,
        endpoint: SwarmEndpoint,
        session: aiohttp.ClientSession,
        timeout: float | None = None,
    ) -> bool:
        """Check one endpoint, update it in place, and return whether it is healthy."""
        name = endpoint["swarm_name"]
        limit = timeout if timeout is not None else self.timeout
        started = time.monotonic()
        problem: str | None = None
        try:
            async with session.get(
                endpoint["health_check_url"],
                timeout=aiohttp.ClientTimeout(total=limit),
            ) as response:
                # Only the status counts; a body of any size is not worth holding.
                await read_at_most(response, MAX_PEER_INFO_BYTES)
                if response.status != 200:
                    problem = f"HTTP {response.status}"
        except TimeoutError:
            problem = f"no answer within {limit:g}s"
        except aiohttp.ClientError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # e.g. a malformed URL; one bad entry must not stop the pass
            problem = f"{type(exc).__name__}: {exc}"
        elapsed = time.monotonic() - started

        state = self._backoff.setdefault(name, _Backoff())
        was_active = endpoint["is_active"]
        if problem is None:
            endpoint["is_active"] = True
            endpoint["last_seen"] = datetime.datetime.now(datetime.UTC)
            endpoint["latency"] = elapsed
            state.failures = 0
            state.next_due = 0.0
            if not was_active:
                logger.info("swarm '%s' is reachable again (%.3fs)", name, elapsed)
            return True

        endpoint["is_active"] = False
        self._last_problem[name] = problem
        state.failures += 1
        delay = self.interval * min(2 ** (state.failures - 1), MAX_BACKOFF_INTERVALS)
        state.next_due = time.monotonic() + delay
        log = logger.warning if was_active else logger.debug
        log("health check of swarm '%s' failed: %s", name, problem)
        if was_active and self._on_down is not None:
            try:
                self._on_down(name, f"health check failed: {problem}")
            except Exception:  # a listener's bug must not stop health checks
                logger.exception("swarm-down listener failed for '%s'", name)
        return False

    def forget(self, swarm_name: str) -> None:
        self._backoff.pop(swarm_name, None)
        self._failed_recheck.pop(swarm_name, None)
        self._last_problem.pop(swarm_name, None)


# --------------------------------------------------------------------------- other probes


async def fetch_swarm_info(
    session: aiohttp.ClientSession, swarm_name: str, base_url: str, timeout: float
) -> dict[str, Any]:
    """Read a remote's `GET /`: protocol version, description, keywords, public flag."""
    url = f"{base_url}/"

    def failure(reason: str) -> InterswarmError:
        return InterswarmError(
            f"failed to get remote swarm info from {url}: {reason}", swarm_name=swarm_name
        )

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                raise failure(f"HTTP {response.status}")
            data = loads_valid(await read_capped(response, MAX_PEER_INFO_BYTES))
    except TimeoutError as exc:
        raise failure(f"no answer within {timeout:g}s") from exc
    except (aiohttp.ClientError, ValueError, AnswerTooLarge) as exc:
        raise failure(str(exc) or type(exc).__name__) from exc
    if not isinstance(data, dict):
        raise failure("answer is not a JSON object")
    # The docs call the field protocol_version, the OpenAPI file calls it version, and
    # `swarm` is an object in the docs but a plain name in the OpenAPI file.
    swarm = data.get("swarm")
    swarm_info = swarm if isinstance(swarm, dict) else {}
    keywords = swarm_info.get("keywords")
    name = swarm_info.get("name") if swarm_info else swarm
    return {
        "name": name if isinstance(name, str) else None,
        "version": str(data.get("protocol_version") or data.get("version") or ""),
        "description": str(swarm_info.get("description") or ""),
        "keywords": [str(k) for k in keywords] if isinstance(keywords, list) else [],
        "public": bool(swarm_info.get("public", False)),
    }


async def fetch_swarm_list(
    session: aiohttp.ClientSession, url: str, timeout: float
) -> list[dict[str, Any]]:
    """The items of a server's `GET /swarms` (`{"swarms": [...]}` or a bare list)."""
    list_url = f"{url.rstrip('/')}/swarms"
    try:
        async with session.get(list_url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                logger.warning("discovery at %s answered HTTP %d", list_url, response.status)
                return []
            data = loads_valid(await read_capped(response, MAX_SWARM_LIST_BYTES))
    except (TimeoutError, aiohttp.ClientError, ValueError, AnswerTooLarge) as exc:
        logger.warning("discovery at %s failed: %s", list_url, exc or type(exc).__name__)
        return []
    items = data.get("swarms") if isinstance(data, dict) else data
    if not isinstance(items, list):
        logger.warning("discovery at %s returned no swarm list", list_url)
        return []
    return [item for item in items if isinstance(item, dict)]
