"""`mail ping URL`: is a MAIL server answering on /health?"""

from __future__ import annotations

import argparse
import asyncio
import sys

DEFAULT_TIMEOUT = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="server base URL, or a swarm:// link")
    parser.add_argument(
        "-t",
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for an answer (default {DEFAULT_TIMEOUT:g})",
    )


def _fail(message: str) -> int:
    print(f"✗ {message}", file=sys.stderr)
    return 1


async def ping(base_url: str, timeout: float) -> int:
    """GET {base_url}/health and print one ✓ or ✗ line; returns the exit code."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(f"{base_url}/health") as response:
                if response.status != 200:
                    return _fail(f"Server returned {response.status}")
                health = await response.json(content_type=None)
    except aiohttp.ClientConnectionError:
        return _fail(f"Cannot connect to {base_url}")
    except TimeoutError:
        return _fail(f"Cannot connect to {base_url} (no answer within {timeout:g} s)")
    except Exception as exc:  # anything else (bad URL, non-JSON body, ...) is reported, not raised
        return _fail(f"Error: {exc or type(exc).__name__}")
    if not isinstance(health, dict) or "status" not in health:
        return _fail(f"Error: unexpected /health answer: {str(health)[:200]}")
    print(f"✓ {health.get('swarm_name', base_url)} is {health['status']}")
    return 0


def run(args: argparse.Namespace) -> int:
    from mail.swarm_url import resolve_target

    try:
        # /health is public, so a swarm:// link's token is not needed here.
        base_url, _ = resolve_target(args.url)
    except ValueError as exc:
        return _fail(f"Error: {exc}")
    if args.timeout <= 0:
        return _fail("Error: --timeout must be a positive number of seconds")
    return asyncio.run(ping(base_url, args.timeout))
