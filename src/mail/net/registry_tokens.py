"""SwarmRegistry's token methods: the environment reference stored for a swarm's token,
moving literal tokens out of the registry file, and checking that the variables are set."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING

from mail.net.registry_store import (
    DEFAULT_TOKEN_PREFIX,
    is_env_ref,
    make_env_ref,
    parse_env_ref,
    resolve_token_ref,
    token_env_var,
)

if TYPE_CHECKING:
    from mail.net.types import SwarmEndpoint

logger = logging.getLogger("mail.net.registry")


class RegistryTokenMethods:
    """Mixed into SwarmRegistry (which provides the attributes used here)."""

    local_swarm_name: str
    endpoints: dict[str, SwarmEndpoint]
    shared: bool
    _tokens: dict[str, str]

    if TYPE_CHECKING:

        def _changing(self) -> contextlib.AbstractContextManager[None]: ...

        def save_persistent_endpoints(self) -> None: ...

    def _get_auth_token_ref(self, swarm_name: str, auth_token: str | None) -> str | None:
        """The reference stored for a swarm's token (None when there is no token)."""
        if not auth_token:
            return None
        return make_env_ref(token_env_var(swarm_name))

    def _resolve_auth_token_ref(self, auth_token_ref: str | None) -> str | None:
        return resolve_token_ref(auth_token_ref)

    def migrate_auth_tokens(self, prefix: str = DEFAULT_TOKEN_PREFIX) -> dict[str, str]:
        """Replace literal tokens in `auth_token_ref` by `${<prefix>_<NAME>}` references.

        The literal stays usable in memory for this process. Returns {swarm: variable} for
        every entry changed, so the caller knows which variables to export.
        """
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
