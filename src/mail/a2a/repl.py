"""REPL commands for A2A and task cancel (registered in mail.repl.parser and .handlers).

a2a-send TEXT... [--url URL] [--context ID] [--task ID] [--data JSON]
task-cancel TASK_ID
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def configure_a2a_send(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="*", help="the message text")
    parser.add_argument(
        "-u", "--url", help="another A2A agent (default: this server, with your key)"
    )
    parser.add_argument("-c", "--context", help="contextId: continue this conversation")
    parser.add_argument("-t", "--task", help="taskId: answer this input-required task")
    parser.add_argument("-d", "--data", help="a JSON object sent as a data part")


def configure_task_cancel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task_id")


async def do_a2a_send(ctx: Any, args: argparse.Namespace) -> None:
    data = json.loads(args.data) if args.data else None
    reply = await ctx.client.a2a_send(
        " ".join(args.text), url=args.url, context_id=args.context, task_id=args.task, data=data
    )
    ctx.render.info(f"{reply.state} — task {reply.task_id}, context {reply.context_id}")
    ctx.render.response(reply.text)
    for item in reply.data:
        ctx.render.json(item)


async def do_task_cancel(ctx: Any, args: argparse.Namespace) -> None:
    result = await ctx.client.cancel_task(args.task_id)
    if result.get("cancelled"):
        ctx.render.success(f"task {args.task_id} cancelled")
    else:
        ctx.render.info(f"task {args.task_id} had already finished ({result.get('state')})")
