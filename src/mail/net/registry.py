"""SwarmRegistry: the swarms this server knows, how to reach them, and whether they are up.

`auth_token_ref` only ever holds an environment reference (``${SWARM_AUTH_TOKEN_<NAME>}``); a
token given at registration stays in this process's memory, so the file never holds a secret.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp

from mail.core.message import is_valid_swarm_name
from mail.net.health import HealthMonitor, fetch_swarm_info, fetch_swarm_list
from mail.net.registry_store import (
    DEFAULT_TOKEN_PREFIX,
    FileSignature,
    clean_endpoint,
    endpoint_to_json,
    entries_from_document,
    file_signature,
    is_env_ref,
    locked,
    make_env_ref,
    normalize_base_url,
    parse_env_ref,
    read_registry_file,
    resolve_token_ref,
    take_file_entries,
    token_env_var,
    write_json_atomic,
)
from mail.net.types import InterswarmError, SwarmEndpoint, SwarmEndpointCleaned
from mail.version import PROTOCOL_VERSION

# The A2A bridge (an adapter above net/) registers A2A agents by their cards; found by name.
A2A_PEER_MODULE = "mail.a2a.peer"

logger = logging.getLogger("mail.net.registry")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class SwarmRegistry:
    """Local and remote swarm endpoints, their persistence file, their tokens' environment
    references, and their health."""

    def __init__(
        self,
        local_swarm_name: str,
        local_base_url: str,
        persistence_file: str | os.PathLike[str] | None = None,
        local_swarm_description: str = "",
        local_swarm_keywords: list[str] | None = None,
        local_swarm_public: bool = False,
        health_check_interval: float = 30.0,
        health_check_timeout: float = 10.0,
        session: aiohttp.ClientSession | None = None,
        shared: bool = False,
    ) -> None:
        self.local_swarm_name = local_swarm_name
        self.local_base_url = local_base_url.rstrip("/")
        self.persistence_file = str(persistence_file or f"registries/{local_swarm_name}.json")
        self.local_swarm_description = local_swarm_description
        self.local_swarm_keywords = list(local_swarm_keywords or [])
        self.local_swarm_public = local_swarm_public
        self.health_check_interval = health_check_interval
        # Also bounds the metadata fetch on registration and discovery requests.
        self.health_check_timeout = health_check_timeout
        self.endpoints: dict[str, SwarmEndpoint] = {}
        # Tokens given to register_swarm (or migrated out of a file) for this process only.
        self._tokens: dict[str, str] = {}
        self._session = session
        self._owns_session = session is None
        # Set when the file exists but cannot be read; saving would then destroy it.
        self._load_error: str | None = None
        # Several processes use the file: re-read it when it changed, change it under a lock.
        self.shared = shared
        self._file_sig: FileSignature | None = None
        self._health = HealthMonitor(
            self._remote_endpoints,
            self._get_session,
            interval=health_check_interval,
            timeout=health_check_timeout,
            on_down=self._notify_down,
        )
        # Called with (swarm name, reason) when a remote that was up is found unreachable.
        self._down_listeners: list[Callable[[str, str], None]] = []
        self.register_local_swarm(self.local_base_url)
        self.load_persistent_endpoints()

    # ------------------------------------------------------------------ registration

    def register_local_swarm(self, base_url: str) -> None:
        base = base_url.rstrip("/")
        self.local_base_url = base
        self.endpoints[self.local_swarm_name] = SwarmEndpoint(
            swarm_name=self.local_swarm_name,
            base_url=base,
            version=PROTOCOL_VERSION,
            health_check_url=f"{base}/health",
            auth_token_ref=None,
            last_seen=_now(),
            is_active=True,
            latency=None,
            swarm_description=self.local_swarm_description,
            keywords=list(self.local_swarm_keywords),
            metadata=None,
            public=self.local_swarm_public,
            volatile=False,
        )

    async def register_swarm(
        self,
        swarm_name: str,
        base_url: str,
        auth_token: str | None = None,
        metadata: dict[str, Any] | None = None,
        volatile: bool = True,
        caller_id: str | None = None,
    ) -> None:
        """Add or replace a remote swarm after reading its `GET /` metadata."""
        swarm_name = (swarm_name or "").strip()
        if not is_valid_swarm_name(swarm_name):
            raise ValueError(f"invalid swarm name: '{swarm_name}'")
        if swarm_name == self.local_swarm_name:
            raise ValueError(f"'{swarm_name}' is the name of this swarm, not a remote one")
        base = normalize_base_url(base_url)
        started = time.monotonic()
        health_url = f"{base}/health"
        if (metadata or {}).get("kind") == "a2a":  # an A2A agent: its card
            # mail.a2a sits above net/: looked up by name, as A2A_PEER_MODULE says.
            peer = importlib.import_module(A2A_PEER_MODULE)
            health_url = peer.card_url(base, metadata)
            info = await peer.fetch_card_info(swarm_name, health_url, self.health_check_timeout)
        else:
            session = await self._get_session()
            info = await fetch_swarm_info(session, swarm_name, base, self.health_check_timeout)
        elapsed = time.monotonic() - started
        reported = info.get("name")
        if reported and reported != swarm_name:
            raise ValueError(
                f"the server at {base} is swarm '{reported}', not '{swarm_name}'; "
                "register it under its own name"
            )

        var = token_env_var(swarm_name)
        with self._changing():
            self._remember_token(swarm_name, var, auth_token, volatile)
            previous = self.endpoints.get(swarm_name)
            self._store_endpoint(
                swarm_name,
                SwarmEndpoint(
                    swarm_name=swarm_name,
                    base_url=base,
                    version=info["version"],
                    health_check_url=health_url,
                    auth_token_ref=make_env_ref(var),
                    last_seen=_now(),
                    is_active=True,
                    latency=elapsed,
                    swarm_description=info["description"],
                    keywords=info["keywords"],
                    metadata=dict(metadata) if metadata else None,
                    public=info["public"],
                    volatile=volatile,
                    caller_id=caller_id or None,
                ),
            )
            if self.shared or not volatile or (previous is not None and not previous["volatile"]):
                self.save_persistent_endpoints()
        logger.info(
            "registered %s swarm '%s' at %s",
            "volatile" if volatile else "persistent",
            swarm_name,
            base,
        )

    def _store_endpoint(self, swarm_name: str, endpoint: SwarmEndpoint) -> None:
        self.endpoints[swarm_name] = endpoint
        self._health.forget(swarm_name)

    def _remember_token(
        self, swarm_name: str, var: str, auth_token: str | None, volatile: bool
    ) -> None:
        if not auth_token:
            self._tokens.pop(swarm_name, None)
            return
        self._tokens[swarm_name] = auth_token
        env_value = os.environ.get(var)
        if not volatile and not env_value:
            logger.warning(
                "token for swarm '%s' is kept in memory for this process only; "
                "export %s so the persistent registration still has it after a restart",
                swarm_name,
                var,
            )
        elif env_value and env_value != auth_token:
            logger.warning(
                "token given for swarm '%s' differs from $%s; using the given one "
                "until restart, the variable afterwards",
                swarm_name,
                var,
            )

    def unregister_swarm(self, swarm_name: str) -> bool:
        """Remove a remote swarm; returns whether it was known. The local swarm stays."""
        if swarm_name == self.local_swarm_name:
            logger.warning("refusing to unregister the local swarm '%s'", swarm_name)
            return False
        with self._changing():
            endpoint = self.endpoints.pop(swarm_name, None)
            if endpoint is None:
                return False
            self._tokens.pop(swarm_name, None)
            self._health.forget(swarm_name)
            if self.shared or not endpoint["volatile"]:
                self.save_persistent_endpoints()
        logger.info("unregistered swarm '%s'", swarm_name)
        return True

    # ------------------------------------------------------------------ queries

    def get_swarm_endpoint(self, swarm_name: str) -> SwarmEndpoint | None:
        self._refresh()
        return self.endpoints.get(swarm_name)

    def expected_caller_id(self, swarm_name: str) -> str | None:
        """The caller id `swarm_name`'s calls must carry, if its entry names one."""
        self._refresh()
        endpoint = self.endpoints.get(swarm_name)
        return endpoint.get("caller_id") if endpoint is not None else None

    def get_resolved_auth_token(self, swarm_name: str) -> str | None:
        """Bearer token for a swarm: the one given at registration, else its env reference."""
        self._refresh()
        endpoint = self.endpoints.get(swarm_name)
        if endpoint is None:
            return None
        return self._tokens.get(swarm_name) or resolve_token_ref(endpoint["auth_token_ref"])

    def get_all_endpoints(self) -> dict[str, SwarmEndpoint]:
        self._refresh()
        return dict(self.endpoints)

    def get_active_endpoints(self) -> dict[str, SwarmEndpoint]:
        self._refresh()
        return {name: ep for name, ep in self.endpoints.items() if ep["is_active"]}

    def get_persistent_endpoints(self) -> dict[str, SwarmEndpoint]:
        self._refresh()
        return {name: ep for name, ep in self.endpoints.items() if not ep["volatile"]}

    def get_public_endpoints(self) -> dict[str, SwarmEndpoint]:
        """The endpoints marked public, by swarm name (the local one included, if public).
        `get_public_endpoints_cleaned` gives the same without token information."""
        self._refresh()
        return {name: ep for name, ep in self.endpoints.items() if ep.get("public")}

    def get_public_endpoints_cleaned(self) -> list[SwarmEndpointCleaned]:
        """Public swarms for `GET /swarms`, without any token information."""
        self._refresh()
        return [clean_endpoint(ep) for ep in self.endpoints.values() if ep["public"]]

    def _remote_endpoints(self) -> list[SwarmEndpoint]:
        self._refresh()
        return [ep for name, ep in self.endpoints.items() if name != self.local_swarm_name]

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """The registry in its file shape, volatile entries included (never raw tokens)."""
        self._refresh()
        return self._file_document(self.endpoints.values())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SwarmRegistry:
        """A registry from `to_dict()`'s shape: the local swarm's settings and the remote
        endpoints (a raw token found in ``auth_token_ref`` is kept in memory only)."""
        registry = cls(
            data.get("local_swarm_name", ""),
            data.get("local_base_url", ""),
            data.get("persistence_file"),
            local_swarm_description=data.get("local_swarm_description", ""),
            local_swarm_keywords=data.get("local_swarm_keywords") or [],
            local_swarm_public=bool(data.get("local_swarm_public", False)),
        )
        entries, tokens = entries_from_document(data, registry.local_swarm_name, True)
        registry._tokens.update(tokens)
        registry.endpoints.update(entries)
        return registry

    def _file_document(self, endpoints: Any) -> dict[str, Any]:
        return {
            "local_swarm_name": self.local_swarm_name,
            "local_base_url": self.local_base_url,
            "local_swarm_description": self.local_swarm_description,
            "local_swarm_keywords": list(self.local_swarm_keywords),
            "local_swarm_public": self.local_swarm_public,
            "endpoints": {ep["swarm_name"]: endpoint_to_json(ep) for ep in endpoints},
        }

    def save_persistent_endpoints(self) -> None:
        """Write the non-volatile endpoints (the local one included), atomically."""
        if self._load_error is not None:
            raise RuntimeError(
                f"not saving the swarm registry: {self._load_error}; fix or remove the file"
            )
        self._move_literal_tokens_to_memory()
        # A shared file holds the volatile entries too: the other processes must see them.
        kept = [ep for ep in self.endpoints.values() if self.shared or not ep["volatile"]]
        document = self._file_document(kept)
        write_json_atomic(Path(self.persistence_file), document)
        if self.shared:
            self._file_sig = file_signature(Path(self.persistence_file))
        logger.debug("saved %d endpoints to %s", len(document["endpoints"]), self.persistence_file)

    def _move_literal_tokens_to_memory(self) -> None:
        # Endpoints are plain dicts that callers can edit; make sure a literal token that
        # slipped into auth_token_ref is moved to memory before anything is written.
        for name, endpoint in self.endpoints.items():
            ref = endpoint["auth_token_ref"]
            if name != self.local_swarm_name and ref and not is_env_ref(ref):
                self._tokens.setdefault(name, ref)
                endpoint["auth_token_ref"] = make_env_ref(token_env_var(name))

    def load_persistent_endpoints(self) -> int:
        """Load entries from the file; returns how many remote endpoints were added."""
        path = Path(self.persistence_file)
        signature = file_signature(path)  # before reading: a later change is read again
        try:
            data = read_registry_file(path)
        except (OSError, ValueError) as exc:
            self._load_error = str(exc)
            logger.error("cannot load swarm registry: %s", exc)
            return 0
        self._load_error = None
        if self.shared:
            self._file_sig = signature
        if data is None:
            # Nothing to load is the normal first start; the file is written at shutdown.
            logger.debug("no swarm registry file at %s yet", path)
            return 0
        self._apply_local_settings(data)
        loaded = 0
        for name, endpoint in self._file_entries(data).items():
            if name in self.endpoints:
                continue
            self.endpoints[name] = endpoint
            loaded += 1
        logger.info("loaded %d swarm endpoints from %s", loaded, path)
        return loaded

    def _file_entries(self, data: dict[str, Any]) -> dict[str, SwarmEndpoint]:
        """The remote endpoints a registry file holds; raw tokens found there go to memory."""
        entries, raw_tokens = entries_from_document(data, self.local_swarm_name, self.shared)
        self._tokens.update(raw_tokens)
        return entries

    # ------------------------------------------------------------------ shared file

    def _refresh(self, *, force: bool = False) -> None:
        """A shared registry: take the file's content if it changed since this process saw it."""
        if not self.shared:
            return
        path = Path(self.persistence_file)
        signature = file_signature(path)
        if signature == self._file_sig and not force:
            return
        try:
            data = read_registry_file(path) or {}
        except (OSError, ValueError) as exc:
            logger.warning("keeping the registry as it was: %s", exc)
            return
        self._file_sig = signature
        fresh = self._file_entries(data)
        for name in take_file_entries(self.endpoints, fresh, self.local_swarm_name):
            self._tokens.pop(name, None)
            self._health.forget(name)

    @contextlib.contextmanager
    def _changing(self) -> Iterator[None]:
        """Around a change: in a shared registry, hold the file's lock and start from its content."""
        if not self.shared:
            yield
            return
        with locked(Path(self.persistence_file)):
            self._refresh(force=True)
            yield

    def _apply_local_settings(self, data: dict[str, Any]) -> None:
        if isinstance(data.get("local_swarm_description"), str):
            self.local_swarm_description = data["local_swarm_description"]
        if isinstance(data.get("local_swarm_keywords"), list):
            self.local_swarm_keywords = [str(k) for k in data["local_swarm_keywords"]]
        if isinstance(data.get("local_swarm_public"), bool):
            self.local_swarm_public = data["local_swarm_public"]
        local = self.endpoints[self.local_swarm_name]
        local["swarm_description"] = self.local_swarm_description
        local["keywords"] = list(self.local_swarm_keywords)
        local["public"] = self.local_swarm_public

    def cleanup_volatile_endpoints(self) -> list[str]:
        """Drop volatile entries (at shutdown) and save; returns the dropped names."""
        if self.shared:
            return []
        dropped = [name for name, ep in self.endpoints.items() if ep["volatile"]]
        for name in dropped:
            del self.endpoints[name]
            self._tokens.pop(name, None)
            self._health.forget(name)
        if dropped:
            logger.info("dropped volatile swarms: %s", ", ".join(dropped))
        self.save_persistent_endpoints()
        return dropped

    # ------------------------------------------------------------------ tokens

    def migrate_auth_tokens(self, prefix: str = DEFAULT_TOKEN_PREFIX) -> dict[str, str]:
        """Replace literal tokens in `auth_token_ref` by `${<prefix>_<NAME>}` references."""
        with self._changing():
            return self._migrate_auth_tokens(prefix)

    def migrate_auth_tokens_to_env_refs(
        self, env_var_prefix: str = DEFAULT_TOKEN_PREFIX, *, prefix: str | None = None
    ) -> None:
        """`migrate_auth_tokens` with v1.3's signature: the keyword is ``env_var_prefix``
        (``prefix`` is accepted too) and nothing is returned."""
        self.migrate_auth_tokens(prefix if prefix is not None else env_var_prefix)

    def _migrate_auth_tokens(self, prefix: str) -> dict[str, str]:
        migrated: dict[str, str] = {}
        for name, endpoint in self.endpoints.items():
            ref = endpoint["auth_token_ref"]
            if name == self.local_swarm_name or not ref or is_env_ref(ref):
                continue
            var = token_env_var(name, prefix)
            self._tokens.setdefault(name, ref)
            endpoint["auth_token_ref"] = make_env_ref(var)
            migrated[name] = var
            logger.warning("moved the token of swarm '%s' to a reference; export %s", name, var)
        if any(self.shared or not self.endpoints[name]["volatile"] for name in migrated):
            self.save_persistent_endpoints()
        return migrated

    def validate_environment_variables(self) -> dict[str, bool]:
        """{variable: is set} for every token reference; logs a warning for each missing one."""
        result: dict[str, bool] = {}
        for name, endpoint in self.endpoints.items():
            var = parse_env_ref(endpoint["auth_token_ref"])
            if var is None:
                continue
            is_set = bool(os.environ.get(var))
            result[var] = is_set
            if is_set:
                continue
            if name in self._tokens:
                if not endpoint["volatile"]:
                    logger.warning(
                        "%s is not set: swarm '%s' works now but loses its token on restart",
                        var,
                        name,
                    )
            else:
                logger.warning("%s is not set: swarm '%s' has no auth token", var, name)
        return result

    # ------------------------------------------------------------------ liveness

    def add_down_listener(self, listener: Callable[[str, str], None]) -> None:
        """Call `listener(swarm_name, reason)` whenever a remote is found unreachable."""
        self._down_listeners.append(listener)

    def remove_down_listener(self, listener: Callable[[str, str], None]) -> None:
        if listener in self._down_listeners:
            self._down_listeners.remove(listener)

    def mark_unreachable(self, swarm_name: str, reason: str) -> None:
        """A request to `swarm_name` could not connect: mark it inactive and tell listeners."""
        endpoint = self.endpoints.get(swarm_name)
        if endpoint is None or swarm_name == self.local_swarm_name or not endpoint["is_active"]:
            return
        endpoint["is_active"] = False
        logger.warning("swarm '%s' is unreachable: %s", swarm_name, reason)
        self._notify_down(swarm_name, reason)

    def _notify_down(self, swarm_name: str, reason: str) -> None:
        for listener in list(self._down_listeners):
            try:
                listener(swarm_name, reason)
            except Exception:  # one listener's bug must not hide the news from the others
                logger.exception("swarm-down listener failed for '%s'", swarm_name)

    # ------------------------------------------------------------------ network

    async def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            if not self._owns_session:
                raise InterswarmError("the HTTP session given to the swarm registry is closed")
            self._session = aiohttp.ClientSession()
        return self._session

    async def start_health_checks(self) -> None:
        """Check every remote now and then every `health_check_interval` seconds."""
        self._health.start()

    async def stop_health_checks(self) -> None:
        await self._health.stop()

    def health_checks_running(self) -> bool:
        return self._health.running

    async def recheck(self, swarm_name: str) -> str | None:
        """Probe a remote marked inactive now (a send is waiting on it)."""
        endpoint = self.get_swarm_endpoint(swarm_name)
        if endpoint is None:
            return f"unknown swarm endpoint: '{swarm_name}'"
        if endpoint["is_active"] or swarm_name == self.local_swarm_name:
            return None
        return await self._health.recheck(endpoint)

    async def check_health_now(self) -> None:
        """Run one health-check pass over every remote, ignoring backoff."""
        await self._health.run_pass(force=True)

    async def discover_swarms(self, discovery_urls: list[str]) -> list[str]:
        """Register the swarms listed by other servers' `GET /swarms`."""
        registered: list[str] = []
        session = await self._get_session()
        for url in discovery_urls:
            for item in await fetch_swarm_list(session, url, self.health_check_timeout):
                name = item.get("swarm_name") or item.get("name")
                base_url = item.get("base_url")
                if not isinstance(name, str) or not isinstance(base_url, str):
                    continue
                if name == self.local_swarm_name or name in self.endpoints:
                    continue
                try:
                    await self.register_swarm(
                        name,
                        base_url,
                        auth_token=item.get("auth_token"),
                        metadata=item.get("metadata"),
                        volatile=bool(item.get("volatile", True)),
                    )
                except (InterswarmError, ValueError, OSError, RuntimeError) as exc:
                    logger.warning("could not register discovered swarm '%s': %s", name, exc)
                    continue
                registered.append(name)
        return registered

    async def aclose(self) -> None:
        """Stop health checks and close the HTTP session if the registry created it."""
        await self.stop_health_checks()
        if self._owns_session and self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None if self._owns_session else self._session
