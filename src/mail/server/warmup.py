"""Warm what start-up defers, so the first answer does not pay for it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("mail.server")

# Seconds between the end of the lifespan start-up and the warm-up: long enough for the
# server to bind and answer its first /health without sharing the interpreter with an import.
WARM_UP_DELAY = 0.2

_MODEL_FACTORY_MODULES = ("mail.factories", "mail.examples")

# What start-up leaves to the first request of a user and the warm-up loads: the store
# observer and restore of an instance (with the durable task journal), history compression.
# tests/test_startup_warmup.py fails when a first request imports a mail module not listed.
DEFERRED_MODULES = ("mail.api.persistence", "mail.api.compression")

# Seconds after the end of start-up when the warm-up starts if no GET /health came first.
FALLBACK_DELAY = 1.0


def warm_agent_tool_specs(agent: Any, swarm_exclude: list[str]) -> None:
    """Build the tool specs of a template's ``agent`` the way its first turn does."""
    from mail.core.agents import AgentCore
    from mail.core.tool_rights import wiring_tool_names

    core = AgentCore(
        function=None,  # type: ignore[arg-type]  # the wiring alone names the tools
        comm_targets=list(agent.comm_targets),
        actions=[a.name for a in agent.actions],
        enable_interswarm=agent.enable_interswarm,
        can_complete_tasks=agent.can_complete_tasks,
        tool_format=agent.tool_format,
        team_tools=tuple(agent.team_tools),
        exclude_tools=tuple(sorted(set(agent.exclude_tools) | set(swarm_exclude))),
    )
    wiring_tool_names(core, swarm_exclude)
    agent.tool_specs()


class StartupWarmUp:
    """Imports ``DEFERRED_MODULES`` and builds each agent's tool specs once, one step at a
    time on the event loop, after the first /health answered.

    ``start`` is what /health runs after its answer went out (a background task); the timer
    armed by ``arm`` starts it anyway when no /health comes.
    """

    def __init__(
        self,
        template: Any = None,
        modules: tuple[str, ...] = DEFERRED_MODULES,
        fallback_delay: float = FALLBACK_DELAY,
    ) -> None:
        self.template = template
        self.modules = modules
        self.fallback_delay = fallback_delay
        self.loaded: list[str] = []  # the modules the warm-up imported (not loaded before)
        self.seconds: float | None = None  # how long it took, once done
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Future[None] | None = None
        self._closed = False
        self.trigger = ""  # what started it: the first /health, or the fallback timer

    @property
    def started(self) -> bool:
        return self._task is not None or self._closed

    def arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(
            self.fallback_delay, self._begin, f"no GET /health within {self.fallback_delay:g} s"
        )

    async def start(self) -> None:
        self._begin("the first GET /health answered")

    def _begin(self, trigger: str) -> None:
        if self.started:
            return
        self.trigger = trigger
        if self._timer is not None:
            self._timer.cancel()
        self._task = asyncio.ensure_future(self._run())

    def _steps(self) -> list[tuple[str, Callable[[], object]]]:
        steps: list[tuple[str, Callable[[], object]]] = [
            # __import__, as an import statement does (importlib.import_module skips the
            # interpreter's own import path, and with it -X importtime's record).
            (name, functools.partial(__import__, name))
            for name in self.modules
            if name not in sys.modules
        ]
        swarm_exclude = list(getattr(self.template, "exclude_tools", None) or [])
        for agent in getattr(self.template, "agents", None) or []:
            steps.append(
                (
                    f"agent {agent.name}",
                    functools.partial(warm_agent_tool_specs, agent, swarm_exclude),
                )
            )
        return steps

    async def _run(self) -> None:
        began = time.perf_counter()
        longest = 0.0
        agents = 0
        for label, step in self._steps():
            if self._closed:
                return
            t0 = time.perf_counter()
            try:
                step()
            except Exception:  # noqa: BLE001 - the first request then does (and reports) it
                logger.warning("start-up warm-up: %s failed", label, exc_info=True)
            else:
                if label.startswith("agent "):
                    agents += 1
                else:
                    self.loaded.append(label)
            longest = max(longest, time.perf_counter() - t0)
            await asyncio.sleep(0)  # what is ready (a request) runs between the steps
        self.seconds = time.perf_counter() - began
        logger.debug(
            "start-up warm-up (%s) done in %.0f ms (longest step %.1f ms): imported %s;"
            " tool specs of %d agent(s)",
            self.trigger,
            1000 * self.seconds,
            1000 * longest,
            ", ".join(self.loaded) or "nothing (already loaded)",
            agents,
        )

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task


def uses_model_library(template: Any) -> bool:
    """Whether any agent of ``template`` is likely to call LiteLLM.

    Agents on the offline demo model (``mail/...``) never do: it answers in-process.
    """
    from mail.factories.demo_model import is_offline_model

    for agent in getattr(template, "agents", None) or []:
        params = getattr(agent, "agent_params", None) or {}
        llm = params.get("llm") if isinstance(params, dict) else None
        if isinstance(llm, str):
            if is_offline_model(llm):
                continue
            return True
        module = getattr(getattr(agent, "factory", None), "__module__", "") or ""
        if module.startswith(_MODEL_FACTORY_MODULES):
            return True
    return False


def schedule_warm_up(template: Any, delay: float = WARM_UP_DELAY) -> asyncio.TimerHandle | None:
    """Start the background import ``delay`` seconds from now if the swarm needs it."""
    if not uses_model_library(template):
        return None
    from mail.factories._litellm import litellm_ready, warm_litellm

    if litellm_ready():
        return None

    def start() -> None:
        logger.debug("warming up the model library in the background")
        warm_litellm().add_done_callback(lambda _done: warn_missing_keys(template))

    return asyncio.get_running_loop().call_later(delay, start)


def missing_key_warnings(template: Any) -> list[str]:
    """One line per agent whose model cannot be called for lack of a key or proxy URL.

    Agents with their own ``api_key`` or ``api_base`` are left alone (a local model server
    needs no key). Reads LiteLLM's list of the variables each provider needs.
    """
    from mail.factories._litellm import missing_provider_keys
    from mail.factories.demo_model import is_offline_model

    lines: list[str] = []
    for agent in getattr(template, "agents", None) or []:
        params = getattr(agent, "agent_params", None) or {}
        llm = params.get("llm") if isinstance(params, dict) else None
        if not isinstance(llm, str) or is_offline_model(llm):
            continue
        if params.get("api_key") or params.get("api_base"):
            continue
        if params.get("use_proxy", True):
            if not os.environ.get("LITELLM_PROXY_API_BASE"):
                lines.append(
                    f"agent '{agent.name}' calls {llm} through a LiteLLM proxy (use_proxy) but "
                    "LITELLM_PROXY_API_BASE is not set: set it, or use_proxy: false"
                )
            continue
        missing = missing_provider_keys(llm)
        if missing:
            lines.append(
                f"agent '{agent.name}' uses {llm} but {', '.join(missing)} is not set: its "
                "calls will fail until you set it and restart the server"
            )
    return lines


def warn_missing_keys(template: Any) -> None:
    try:
        for line in missing_key_warnings(template):
            logger.warning("%s", line)
    except Exception:  # noqa: BLE001 - a check must never take the server down
        logger.debug("provider key check failed", exc_info=True)
