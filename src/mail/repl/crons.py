"""REPL commands for scheduled tasks (docs/crons.md); registered in mail.repl.parser and
.handlers, as mail.repl.webhooks' are."""

from __future__ import annotations

import argparse
from typing import Any

from mail.repl.webhooks import configure_list


def configure_create(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("schedule", help="a cron expression, quoted (6 fields: seconds first)")
    parser.add_argument("text", nargs="+", help="the message's body")
    parser.add_argument("--tz", help="IANA time zone of the schedule (default: UTC)")
    parser.add_argument("-s", "--subject")
    parser.add_argument("-e", "--entrypoint")
    parser.add_argument("--webhook", help="a URL each run's events are POSTed to")
    parser.add_argument("-d", "--description", help="a note for you")


def configure_update(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cron_id")
    parser.add_argument("--schedule")
    parser.add_argument("--tz")
    parser.add_argument("--text", help="a new body for the message")
    parser.add_argument("--description")
    parser.add_argument("--paused", choices=["on", "off"])


def configure_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cron_id")


def _line(cron: dict[str, Any]) -> str:
    when = "paused" if cron["paused"] else f"next run {cron['next_run']}"
    return f"cron {cron['id']} ({cron['schedule']}, {cron['timezone']}): {when}"


async def do_list(ctx: Any, args: argparse.Namespace) -> None:
    crons = await ctx.client.list_crons()
    if args.verbose:
        ctx.render.json(crons)
        return
    ctx.render.table(
        ["cron id", "schedule", "zone", "next run", "runs", "last error"],
        (
            [
                c["id"],
                c["schedule"],
                c["timezone"],
                "paused" if c["paused"] else c["next_run"],
                c["runs"],
                c["last_error"] or "",
            ]
            for c in crons
        ),
        empty='no scheduled tasks yet (cron-create "0 9 * * *" TEXT)',
    )


async def do_create(ctx: Any, args: argparse.Namespace) -> None:
    message: dict[str, Any] = {"body": " ".join(args.text)}
    if args.subject:
        message["subject"] = args.subject
    if args.entrypoint:
        message["entrypoint"] = args.entrypoint
    cron = await ctx.client.create_cron(
        args.schedule,
        message,
        timezone=args.tz,
        webhook=args.webhook,
        description=args.description,
    )
    ctx.render.success(_line(cron))
    secret = (cron.get("webhook") or {}).get("secret")
    if secret:
        ctx.render.info(f"webhook signing secret (shown this once): {secret}")


async def do_update(ctx: Any, args: argparse.Namespace) -> None:
    changes: dict[str, Any] = {}
    if args.schedule:
        changes["schedule"] = args.schedule
    if args.tz:
        changes["timezone"] = args.tz
    if args.text:
        current = await ctx.client.get_cron(args.cron_id)
        changes["message"] = {**current["message"], "body": args.text}
        changes["message"].pop("message", None)
    if args.description is not None:
        changes["description"] = args.description
    if args.paused:
        changes["paused"] = args.paused == "on"
    ctx.render.success(_line(await ctx.client.update_cron(args.cron_id, **changes)))


async def do_delete(ctx: Any, args: argparse.Namespace) -> None:
    await ctx.client.delete_cron(args.cron_id)
    ctx.render.success(f"cron {args.cron_id} deleted")


# name -> (aliases, summary, configure, handler)
COMMANDS: dict[str, tuple[tuple[str, ...], str, Any, Any]] = {
    "crons": (("crs",), "GET /crons — your scheduled tasks", configure_list, do_list),
    "cron-create": (("crc",), 'POST /crons "SCHEDULE" TEXT', configure_create, do_create),
    "cron-update": (("cru",), "PATCH /crons/ID (--paused on|off)", configure_update, do_update),
    "cron-delete": (("crd",), "DELETE /crons/ID", configure_id, do_delete),
}
