"""A pool of warm instance hosts per node, and the directory that hands them out."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from mail.cluster.actor import INSTANCE_CPUS, InstanceActor
from mail.cluster.settings import require_ray
from mail.utils.background import hold

logger = logging.getLogger("mail.cluster")

DIRECTORY_ACTOR = "_directory"
HOST_PREFIX = "_host/"
# Seconds between the directory's checks of the nodes (new ones get warm hosts); a host that
# dies or is handed out wakes the refill at once.
REFILL_INTERVAL = 2.0
# Seconds a warm host may take to start before the directory gives up on it (and retries).
WARM_TIMEOUT = 180.0
# Seconds a front end waits at start-up for the first warm host of its profile.
STARTUP_WAIT = 60.0
# Seconds the directory keeps trying to move a dead host's instance to another host (a cold
# host may fail too: Ray can place it on the dying node before it is declared dead), with a
# pause between attempts that grows from 0.25 s to 5 s.
FAILOVER_WINDOW = 180.0
_HEAD_RESOURCE = "node:__internal_head__"


@dataclass
class _Profile:
    """How one kind of front end builds its hosts (configuration, environment, folder)."""

    config_json: str
    env: dict[str, str]
    cwd: str
    template_json: str | None
    size: int
    warm: dict[str, list[Any]] = field(default_factory=dict)  # node id -> ready hosts
    starting: dict[str, int] = field(default_factory=dict)  # node id -> hosts starting


@dataclass
class _Assigned:
    handle: Any
    caller: dict[str, Any]
    profile: str
    template_json: str | None
    node: str = ""  # where the host runs: a failover avoids it


class UnknownProfile(LookupError):
    """The directory (restarted) does not know the front end's profile: register again."""


class HostDirectory:
    """The body of the directory actor (one per deployment namespace)."""

    def __init__(self, namespace: str) -> None:
        self.ray = require_ray()
        self.namespace = namespace
        self.profiles: dict[str, _Profile] = {}
        self.assigned: dict[str, _Assigned] = {}
        self._adopting: dict[str, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()
        self._warm_changed = asyncio.Event()
        self._actor_class = self.ray.remote(InstanceActor)
        loop = asyncio.get_running_loop()
        self._recovered = loop.create_task(self._recover())
        self._filler = loop.create_task(self._fill_forever())

    # -- what front ends ask -------------------------------------------------------------------

    async def register(
        self,
        key: str,
        config_json: str,
        env: dict[str, str],
        cwd: str,
        template_json: str | None,
        size: int,
    ) -> None:
        profile = self.profiles.get(key)
        if profile is None:
            self.profiles[key] = _Profile(config_json, env, cwd, template_json, size)
        else:
            profile.size = size
        self._wake.set()

    async def assign(
        self,
        name: str,
        caller: dict[str, Any],
        key: str,
        template_json: str | None,
        avoid: frozenset[str] = frozenset(),
    ) -> Any:
        """The host of instance ``name``; a warm one adopts it when it has none (not on a
        node in ``avoid``: where its last host died)."""
        await self._recovered
        entry = self.assigned.get(name)
        if entry is not None:
            return entry.handle
        if key not in self.profiles:
            raise UnknownProfile(key)
        pending = self._adopting.get(name)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._adopting[name] = future
        try:
            handle = await self._adopt(name, caller, key, template_json, set(avoid))
            future.set_result(handle)
            return handle
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            self._adopting.pop(name, None)

    async def lookup(self, name: str) -> Any | None:
        await self._recovered
        entry = self.assigned.get(name)
        if entry is None and name in self._adopting:
            return await asyncio.shield(self._adopting[name])
        return None if entry is None else entry.handle

    async def names(self) -> list[str]:
        await self._recovered
        return sorted(self.assigned)

    async def pool(self) -> dict[str, Any]:
        """Warm and starting hosts per profile and node (tests, bench)."""
        return {
            key[:12]: {
                "size": p.size,
                "warm": {node: len(hosts) for node, hosts in p.warm.items()},
                "starting": dict(p.starting),
            }
            for key, p in self.profiles.items()
        } | {"assigned": len(self.assigned)}

    async def wait_warm(self, key: str, timeout: float) -> bool:
        """Wait until profile ``key`` has a warm host (on any node; the others fill later)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            profile = self.profiles.get(key)
            if profile is not None and any(profile.warm.values()):
                return True
            self._warm_changed.clear()
            left = deadline - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._warm_changed.wait(), min(left, REFILL_INTERVAL))

    async def end(self, name: str) -> bool:
        """End instance ``name``'s host for good (``mail cluster end``): no failover."""
        await self._recovered
        entry = self.assigned.pop(name, None)
        if entry is None:
            return False
        with contextlib.suppress(Exception):
            self.ray.kill(entry.handle, no_restart=True)
        return True

    async def end_all(self) -> list[str]:
        """End every host, warm or assigned (``mail cluster end --all``); returns the names."""
        ended = sorted(self.assigned)
        hosts = [e.handle for e in self.assigned.values()]
        for profile in self.profiles.values():
            profile.size = 0
            hosts += [h for warm in profile.warm.values() for h in warm]
            profile.warm.clear()
        self.assigned.clear()
        for handle in hosts:
            with contextlib.suppress(Exception):
                self.ray.kill(handle, no_restart=True)
        return ended

    # -- adoption and failover -----------------------------------------------------------------

    async def _adopt(
        self,
        name: str,
        caller: dict[str, Any],
        key: str,
        template_json: str | None,
        avoid: set[str],
    ) -> Any:
        profile = self.profiles[key]
        if template_json != profile.template_json:  # POST /swarms/load: warm hosts are stale
            profile.template_json = template_json
            self._retire_warm(profile)
        while True:
            node, warm_host = self._take_warm(profile, avoid)
            handle: Any = warm_host
            cold = handle is None
            if cold:  # the pool is empty (or off): start one for this instance
                node = await self._cold_node(avoid)
                handle = self._new_host(profile, key, node or None)
            try:
                info = await asyncio.wait_for(
                    handle.adopt.remote(name, caller, template_json), WARM_TIMEOUT
                )
            except (self.ray.exceptions.RayActorError, TimeoutError) as exc:
                # A host on a node that just died (or never started): not that node again.
                logger.info("host lost before adopting %s: %s", name, type(exc).__name__)
                with contextlib.suppress(Exception):
                    self.ray.kill(handle, no_restart=True)
                if node:
                    avoid.add(node)
                if cold:
                    raise
                continue
            except self.ray.exceptions.RayTaskError:
                # It refused (its start failed, `InstanceStartFailed`, and may hold some of
                # its pools open): ended; the front end answers 503, a new host starts next time.
                with contextlib.suppress(Exception):
                    self.ray.kill(handle, no_restart=True)
                raise
            break
        node = str(info.get("node_id") or node) if isinstance(info, dict) else node
        entry = _Assigned(handle, caller, key, template_json, node)
        self.assigned[name] = entry
        self._spawn(self._watch_assigned(name, entry))
        self._wake.set()
        logger.info("instance %s adopted by a %s host", name, "cold" if cold else "warm")
        return handle

    async def _watch_assigned(self, name: str, entry: _Assigned) -> None:
        died = False
        try:
            await entry.handle.watch.remote()
        except Exception:  # noqa: BLE001 - its process or node died
            died = True
        if self.assigned.get(name) is not entry:
            return
        del self.assigned[name]
        if died:
            await self._fail_over(name, entry)

    async def _fail_over(self, name: str, entry: _Assigned) -> None:
        """Move a dead host's instance to a host of another node, so its running tasks
        continue before any request arrives; retried (with backoff) until one adopts it."""
        logger.warning("host of instance %s died: another host adopts it", name)
        avoid = frozenset({entry.node} - {""})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FAILOVER_WINDOW
        attempt = 0
        while entry.profile in self.profiles and name not in self.assigned:
            try:
                await self.assign(name, entry.caller, entry.profile, entry.template_json, avoid)
                return
            except Exception as exc:  # noqa: BLE001 - the next attempt may find a live node
                pause = min(5.0, 0.25 * 2**attempt)
                if loop.time() + pause > deadline:
                    logger.error("instance %s has no host after its node died: %s", name, exc)
                    return
                logger.warning("failover of %s failed (%s); again in %.2f s", name, exc, pause)
                await asyncio.sleep(pause)
                attempt += 1

    # -- the pool ------------------------------------------------------------------------------

    @staticmethod
    def _take_warm(profile: _Profile, avoid: set[str]) -> tuple[str, Any | None]:
        """A warm host from the node with the most of them (spreads instances over nodes),
        none from a node in ``avoid``; returns (node, host)."""
        warm = {node: hosts for node, hosts in profile.warm.items() if node not in avoid}
        fullest = max(warm, key=lambda node: len(warm[node]), default=None)
        if fullest is None or not warm[fullest]:
            return "", None
        return fullest, warm[fullest].pop()

    async def _cold_node(self, avoid: set[str]) -> str:
        """Where a cold host goes when some nodes are to be avoided ("" lets Ray choose):
        Ray may still count a node that just died as alive and place the host there."""
        if not avoid:
            return ""
        try:
            alive = [node for node in await self._nodes() if node not in avoid]
        except Exception:  # noqa: BLE001 - Ray chooses
            return ""
        if not alive:
            return ""
        load = {node: 0 for node in alive}
        for entry in self.assigned.values():
            if entry.node in load:
                load[entry.node] += 1
        return min(alive, key=load.__getitem__)

    def _retire_warm(self, profile: _Profile) -> None:
        for hosts in profile.warm.values():
            for handle in hosts:
                with contextlib.suppress(Exception):
                    self.ray.kill(handle, no_restart=True)
        profile.warm.clear()
        self._wake.set()

    def _new_host(self, profile: _Profile, key: str, node_id: str | None) -> Any:
        options: dict[str, Any] = {
            "name": HOST_PREFIX + uuid.uuid4().hex,
            "namespace": self.namespace,
            "lifetime": "detached",
            # The directory moves a dead host's instance to another host (Ray never restarts
            # one: a restarted process would be cold) and decides whether a call is resent.
            "max_restarts": 0,
            "max_task_retries": 0,
            "num_cpus": INSTANCE_CPUS,
            "runtime_env": {"env_vars": profile.env},
        }
        if node_id is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
        return self._actor_class.options(**options).remote(
            profile.config_json, None, profile.env, profile.cwd, profile.template_json, key
        )

    async def _nodes(self) -> list[str]:
        """Alive nodes that can hold an instance (the head of a test cluster has no CPUs)."""
        nodes = await asyncio.to_thread(self.ray.nodes)
        return [
            n["NodeID"]
            for n in nodes
            if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= INSTANCE_CPUS
        ]

    async def _fill_forever(self) -> None:
        await self._recovered
        while True:
            try:
                await self._fill()
            except Exception:  # noqa: BLE001 - the next round tries again
                logger.exception("refilling the warm pool")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), REFILL_INTERVAL)

    async def _fill(self) -> None:
        alive = await self._nodes()
        for key, profile in self.profiles.items():
            for gone in set(profile.warm) - set(alive):
                profile.warm.pop(gone, None)
            for node in alive:
                have = len(profile.warm.get(node, ())) + profile.starting.get(node, 0)
                for _ in range(max(0, profile.size - have)):
                    profile.starting[node] = profile.starting.get(node, 0) + 1
                    self._spawn(self._start_warm(profile, key, node))

    async def _start_warm(self, profile: _Profile, key: str, node: str) -> None:
        handle = None
        try:
            handle = self._new_host(profile, key, node)
            await asyncio.wait_for(handle.warm.remote(), WARM_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - node gone or start failed: next round
            logger.warning("a warm host on node %s did not start: %s", node[:12], exc)
            if handle is not None:
                with contextlib.suppress(Exception):
                    self.ray.kill(handle, no_restart=True)
            await asyncio.sleep(REFILL_INTERVAL)  # no tight loop on a failing node
            return
        finally:
            profile.starting[node] = max(0, profile.starting.get(node, 1) - 1)
        profile.warm.setdefault(node, []).append(handle)
        self._warm_changed.set()
        self._spawn(self._watch_warm(profile, node, handle))

    async def _watch_warm(self, profile: _Profile, node: str, handle: Any) -> None:
        with contextlib.suppress(Exception):
            await handle.watch.remote()
        hosts = profile.warm.get(node, [])
        if handle in hosts:
            hosts.remove(handle)
            self._wake.set()

    def _spawn(self, coro: Any) -> None:
        hold(self._tasks, asyncio.get_running_loop().create_task(coro))

    # -- restart -------------------------------------------------------------------------------

    async def _recover(self) -> None:
        """After a restart of this actor: learn the hosts' assignments from the hosts."""
        try:
            entries = await asyncio.to_thread(self.ray.util.list_named_actors, all_namespaces=True)
        except Exception:  # noqa: BLE001 - nothing to recover from
            return
        names = [
            e["name"]
            for e in entries
            if isinstance(e, dict)
            and e.get("namespace") == self.namespace
            and str(e.get("name", "")).startswith(HOST_PREFIX)
        ]
        for host_name in names:
            try:
                handle = await asyncio.to_thread(self.ray.get_actor, host_name, self.namespace)
                info = await asyncio.wait_for(handle.adoption.remote(), 10.0)
            except Exception:  # noqa: BLE001 - dead or stuck: leave it out
                continue
            if info.get("name"):
                entry = _Assigned(
                    handle,
                    info["caller"],
                    info["profile"],
                    info["template_json"],
                    str(info.get("node_id") or ""),
                )
                self.assigned[info["name"]] = entry
                self._spawn(self._watch_assigned(info["name"], entry))
            else:
                with contextlib.suppress(Exception):
                    self.ray.kill(handle, no_restart=True)


class PoolClient:
    """A front end's handle on the deployment's directory."""

    def __init__(self, instances: Any, size: int) -> None:
        self.instances = instances
        self.size = size
        self.cwd = os.getcwd()
        profile = json.dumps([instances.config_json, instances.env, self.cwd], sort_keys=True)
        self.key = hashlib.sha256(profile.encode()).hexdigest()
        self._handle: Any = None

    def directory(self) -> Any:
        if self._handle is None:
            inst = self.instances
            self._handle = (
                inst.ray.remote(HostDirectory)
                .options(
                    name=DIRECTORY_ACTOR,
                    namespace=inst.namespace,
                    get_if_exists=True,
                    lifetime="detached",
                    max_restarts=-1,
                    max_task_retries=-1,
                    num_cpus=0,
                    resources={_HEAD_RESOURCE: 0.001},
                )
                .remote(inst.namespace)
            )
        return self._handle

    async def _directory(self) -> Any:
        return await asyncio.to_thread(self.directory)

    async def _call(self, method: str, *args: Any) -> Any:
        """Call the directory; once more through a new one if it was ended (``mail cluster
        end --all``) since this front end last used it."""
        for attempt in (1, 2):
            handle = await self._directory()
            try:
                return await getattr(handle, method).remote(*args)
            except self.instances.ray.exceptions.RayActorError:
                self._handle = None
                if attempt == 2:
                    raise
                if method != "register":
                    await self.register()
        return None

    async def register(self) -> None:
        inst = self.instances
        await self._call(
            "register",
            self.key,
            inst.config_json,
            inst.env,
            self.cwd,
            inst.template_json,
            self.size,
        )

    async def start(self, timeout: float = STARTUP_WAIT) -> None:
        """Make (or find) the directory; wait for the first warm host."""
        await self.register()
        handle = await self._directory()
        if not await handle.wait_warm.remote(self.key, timeout):
            logger.warning("the warm pool is not full after %.0f s; serving anyway", timeout)

    async def assign(self, name: str, caller: dict[str, Any], template_json: str | None) -> Any:
        try:
            return await self._call("assign", name, caller, self.key, template_json)
        except self.instances.ray.exceptions.RayTaskError as exc:
            if not isinstance(getattr(exc, "cause", None), UnknownProfile):
                raise
        await self.register()  # the directory was restarted and forgot this front end
        return await self._call("assign", name, caller, self.key, template_json)

    async def lookup(self, name: str) -> Any | None:
        return await self._call("lookup", name)

    def names(self) -> list[str]:
        names: list[str] = self.instances.ray.get(self.directory().names.remote())
        return names


def find_directory(ray: Any, namespace: str) -> Any | None:
    """The directory of ``namespace``, if its deployment runs a warm pool."""
    try:
        return ray.get_actor(DIRECTORY_ACTOR, namespace=namespace)
    except ValueError:
        return None


def pooled_names(ray: Any, namespace: str) -> list[str]:
    """The instances the directory of ``namespace`` assigned (none without a warm pool)."""
    directory = find_directory(ray, namespace)
    if directory is None:
        return []
    names: list[str] = ray.get(directory.names.remote(), timeout=30)
    return names


def end_instance(ray: Any, namespace: str, name: str) -> None:
    """End instance ``name``'s actor for good, named or pooled; ValueError when it has none."""
    directory = find_directory(ray, namespace)
    if directory is not None and ray.get(directory.end.remote(name), timeout=30):
        return
    ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)


def instance_handle(ray: Any, namespace: str, name: str) -> Any:
    """The actor of instance ``name``, named or pooled; ValueError when it has none."""
    directory = find_directory(ray, namespace)
    if directory is not None:
        handle = ray.get(directory.lookup.remote(name), timeout=30)
        if handle is not None:
            return handle
    return ray.get_actor(name, namespace=namespace)


def end_pool(ray: Any, namespace: str) -> int:
    """End the directory of ``namespace`` and every host it started; returns how many."""
    directory = find_directory(ray, namespace)
    if directory is None:
        return 0
    with contextlib.suppress(Exception):
        ray.get(directory.end_all.remote(), timeout=30)
    hosts = [
        e["name"]
        for e in ray.util.list_named_actors(all_namespaces=True)
        if isinstance(e, dict)
        and e.get("namespace") == namespace
        and str(e.get("name", "")).startswith(HOST_PREFIX)
    ]
    ray.kill(directory, no_restart=True)
    for host in hosts:  # warm hosts still starting when the directory ended
        with contextlib.suppress(Exception):
            ray.kill(ray.get_actor(host, namespace=namespace), no_restart=True)
    return len(hosts)
