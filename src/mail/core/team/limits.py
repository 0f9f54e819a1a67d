"""Sizes and quotas of what agents (and callers) hand to the team tools."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mail.core.team.service import TeamError

if TYPE_CHECKING:
    from mail.core.team.service import TeamService


def check_length(value: str, limit: int, what: str, setting: str) -> None:
    if len(value) > limit:
        raise TeamError(f"{what} is {len(value)} characters; the limit is {limit} ({setting})")


def check_body(team: TeamService, body: str, what: str = "the post") -> None:
    check_length(body, team.settings.max_body_chars, what, "[server.settings] max_message_body")


def check_title(team: TeamService, title: str) -> None:
    check_length(
        title, team.settings.max_title_chars, "the title", "[server.team_tools] max_title_chars"
    )


def check_attachment_texts(team: TeamService, filename: str, description: str) -> None:
    settings = team.settings
    check_length(
        filename,
        settings.max_filename_chars,
        "the file name",
        "[server.team_tools] max_filename_chars",
    )
    check_length(
        description,
        settings.max_description_chars,
        "the description",
        "[server.team_tools] max_description_chars",
    )


async def check_thread_quota(team: TeamService) -> None:
    limit = team.settings.max_threads
    count = await team.store.count_threads(team.key)
    if count >= limit:
        raise TeamError(
            f"this swarm instance already has {count} threads, the most it may keep "
            f"([server.team_tools] max_threads = {limit}); post to an existing thread instead"
        )


async def check_attachment_quota(team: TeamService, size: int) -> None:
    limit = team.settings.max_attachment_bytes_per_instance
    used = await team.store.attachment_bytes(team.key)
    if used + size > limit:
        raise TeamError(
            f"attachments of this swarm instance would take {used + size} bytes, over its "
            f"quota of {limit} ([server.team_tools] max_attachment_bytes_per_instance)"
        )
