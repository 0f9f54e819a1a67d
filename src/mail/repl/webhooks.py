"""REPL commands for webhooks (docs/webhooks.md); registered in mail.repl.parser and .handlers."""

from __future__ import annotations

import argparse
from typing import Any


def configure_list(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", help="show the JSON answer")


def configure_create(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url")
    parser.add_argument("events", nargs="*", help="event types or patterns (default: *)")
    parser.add_argument("-d", "--description", help="a note for you")


def configure_update(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("webhook_id")
    parser.add_argument("--url")
    parser.add_argument("--events", nargs="+")
    parser.add_argument("--description")
    parser.add_argument("--active", choices=["on", "off"])


def configure_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("webhook_id")


def configure_rotate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("webhook_id")
    parser.add_argument(
        "--overlap", type=float, default=86400, help="seconds the old secret keeps signing"
    )


def configure_deliveries(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("webhook_id")
    parser.add_argument("-s", "--status", choices=["pending", "delivered", "failed"])
    parser.add_argument("-v", "--verbose", action="store_true", help="show the JSON answer")


def configure_retry(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("webhook_id")
    parser.add_argument("delivery_id")


def _show_secret(ctx: Any, hook: dict[str, Any]) -> None:
    ctx.render.success(f"webhook {hook['id']} -> {hook['url']}")
    ctx.render.info(f"signing secret (shown this once): {hook['secret']}")


async def do_list(ctx: Any, args: argparse.Namespace) -> None:
    hooks = await ctx.client.list_webhooks()
    if args.verbose:
        ctx.render.json(hooks)
        return
    ctx.render.table(
        ["webhook id", "url", "events", "state"],
        (
            [
                h["id"],
                h["url"],
                ", ".join(h["events"]),
                "active" if h["active"] else f"disabled: {h['disabled_reason'] or ''}",
            ]
            for h in hooks
        ),
        empty="no webhooks yet (webhook-create URL)",
    )


async def do_create(ctx: Any, args: argparse.Namespace) -> None:
    hook = await ctx.client.create_webhook(
        args.url, args.events or None, description=args.description
    )
    _show_secret(ctx, hook)


async def do_update(ctx: Any, args: argparse.Namespace) -> None:
    changes: dict[str, Any] = {}
    if args.url:
        changes["url"] = args.url
    if args.events:
        changes["events"] = args.events
    if args.description is not None:
        changes["description"] = args.description
    if args.active:
        changes["active"] = args.active == "on"
    hook = await ctx.client.update_webhook(args.webhook_id, **changes)
    ctx.render.success(f"webhook {hook['id']}: {'active' if hook['active'] else 'disabled'}")


async def do_delete(ctx: Any, args: argparse.Namespace) -> None:
    await ctx.client.delete_webhook(args.webhook_id)
    ctx.render.success(f"webhook {args.webhook_id} deleted")


async def do_test(ctx: Any, args: argparse.Namespace) -> None:
    delivery = await ctx.client.test_webhook(args.webhook_id)
    ctx.render.success(f"test delivery {delivery['id']} queued")


async def do_rotate(ctx: Any, args: argparse.Namespace) -> None:
    hook = await ctx.client.rotate_webhook_secret(args.webhook_id, args.overlap)
    _show_secret(ctx, hook)


async def do_deliveries(ctx: Any, args: argparse.Namespace) -> None:
    found = await ctx.client.webhook_deliveries(args.webhook_id, status=args.status)
    if args.verbose:
        ctx.render.json(found)
        return
    ctx.render.table(
        ["delivery id", "event", "status", "attempts", "last"],
        (
            [
                d["id"],
                d["event_type"],
                d["status"],
                d["attempts"],
                d["last_error"] or (f"HTTP {d['last_status']}" if d["last_status"] else ""),
            ]
            for d in found
        ),
        empty="no deliveries yet",
    )


async def do_retry(ctx: Any, args: argparse.Namespace) -> None:
    delivery = await ctx.client.retry_webhook_delivery(args.webhook_id, args.delivery_id)
    ctx.render.success(f"delivery {delivery['id']} queued again")


# name -> (aliases, summary, configure, handler)
COMMANDS: dict[str, tuple[tuple[str, ...], str, Any, Any]] = {
    "webhooks": (("whs",), "GET /webhooks — your webhooks", configure_list, do_list),
    "webhook-create": (("whc",), "POST /webhooks URL [EVENT ...]", configure_create, do_create),
    "webhook-update": (("whu",), "PATCH /webhooks/ID", configure_update, do_update),
    "webhook-delete": (("whd",), "DELETE /webhooks/ID", configure_id, do_delete),
    "webhook-test": (("wht",), "POST /webhooks/ID/test — a ping", configure_id, do_test),
    "webhook-rotate": (
        ("whr",),
        "POST /webhooks/ID/rotate-secret",
        configure_rotate,
        do_rotate,
    ),
    "webhook-deliveries": (
        ("whl",),
        "GET /webhooks/ID/deliveries — the delivery log",
        configure_deliveries,
        do_deliveries,
    ),
    "webhook-retry": (
        ("whx",),
        "POST /webhooks/ID/deliveries/DELIVERY/retry",
        configure_retry,
        do_retry,
    ),
}
