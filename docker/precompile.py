"""Build step of the image: check that the server's imports load, then byte-compile them.

Compiling every module of the virtual environment (uv's --compile-bytecode) adds about 100 MB
of .pyc files, most of them for modules the server never imports (litellm alone ships
thousands). Without any .pyc the server's start takes several times longer, because the
non-root user cannot write __pycache__ into the image and recompiles at every start. So this
imports what `mail server` loads, plus whole packages that are small and on the request path,
and compiles exactly those modules. The .pyc files are written as unchecked-hash ones: they
stay valid whatever file times the copy into the runtime stage leaves behind.

Run with the virtual environment's python, PYTHONDONTWRITEBYTECODE=1 (only this script writes).
A failing import fails the build: a stripped or broken extension module is caught here.
"""

from __future__ import annotations

import compileall
import importlib
import py_compile
import sys
import sysconfig
from pathlib import Path

# What `mail server` imports to start, answer, persist and call models.
IMPORTS = [
    "mail",
    "mail.cli",
    "mail.commands.server",
    "mail.commands.db_init",
    "mail.commands.keys",
    "mail.server.app_factory",
    "mail.server.http_protocol",
    "mail.factories",
    "mail.stdlib",
    "mail.store.postgres",
    "mail.store.agent_memory",
    "uvicorn.loops.asyncio",
    "uvicorn.lifespan.on",
    "uvicorn.protocols.http.h11_impl",
    "litellm",
    "asyncpg",
]
OPTIONAL_IMPORTS = ["httptools", "uvicorn.protocols.http.httptools_impl"]
# Packages compiled whole (small, and partly imported lazily while serving requests).
WHOLE_PACKAGES = [
    "mail",
    "uvicorn",
    "fastapi",
    "starlette",
    "sse_starlette",
    "pydantic",
    "anyio",
    "h11",
    "httpx",
    "httpcore",
    "aiohttp",
    "asyncpg",
]


def main() -> int:
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    for name in IMPORTS:
        importlib.import_module(name)
    for name in OPTIONAL_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    count = 0
    for module in list(sys.modules.values()):
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if not origin or not origin.endswith(".py"):
            continue
        path = Path(origin).resolve()
        if site not in path.parents:
            continue
        py_compile.compile(
            str(path),
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        count += 1
    for name in WHOLE_PACKAGES:
        folder = site / name
        if folder.is_dir():
            compileall.compile_dir(
                str(folder),
                quiet=1,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
    print(f"precompiled {count} imported modules and {len(WHOLE_PACKAGES)} whole packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
