"""Scheduled tasks: what ``/crons`` means, and the scheduler that runs them (docs/crons.md)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import logging
import time
import uuid
import zoneinfo
from collections.abc import Mapping
from typing import Any

from croniter import croniter
from fastapi import HTTPException

from mail.config.server import CronsConfig
from mail.server.auth import Caller
from mail.server.backends import ForwardedRequest, InstanceBackend
from mail.server.bodies import parse_message_request
from mail.server.state import ServerState
from mail.store.webhooks import SERIES_CHARS, Bound, OverQuota, Record, new_id
from mail.utils.echo import echo
from mail.webhooks.service import new_subscription
from mail.webhooks.views import WebhookError, check_description, check_fields

logger = logging.getLogger("mail.server.crons")

KIND = "cron"
CRON_FIELDS: tuple[str, ...] = (
    "schedule",
    "timezone",
    "message",
    "webhook",
    "description",
    "paused",
)
MESSAGE_FIELDS: tuple[str, ...] = ("body", "message", "subject", "msg_type", "entrypoint", "kwargs")
# Consecutive runs of a schedule looked at to check its shortest interval.
INTERVAL_SAMPLES = 16
# Seconds before the scheduler reads the schedules again after a failed read.
RETRY_READ = 5.0
# Attempts of a PATCH against concurrent claims (each re-reads the cron).
UPDATE_ATTEMPTS = 5

Owner = tuple[str, str]
# Files of the zone database that name the server's own zone rather than a place.
SERVER_ZONES = frozenset({"localtime", "posixrules"})


_NOTE_TRIES = 5  # compare-and-set tries of a refused run's note (concurrent claims move it)


def _bad(detail: str) -> HTTPException:
    return HTTPException(400, detail)


def _iso(value: float | None) -> str | None:
    if value is None:
        return None
    return dt.datetime.fromtimestamp(value, dt.UTC).isoformat().replace("+00:00", "Z")


# -- schedules (pure) -----------------------------------------------------------------------
def _iterator(schedule: str, zone: zoneinfo.ZoneInfo, at: float) -> croniter:
    start = dt.datetime.fromtimestamp(at, zone)
    return croniter(schedule, start, second_at_beginning=len(schedule.split()) == 6)


def _repeat(schedule: str, zone: zoneinfo.ZoneInfo, at: float) -> bool:
    """Whether `at` is the second pass of a wall-clock time (the hour repeated when clocks go
    back) of a schedule with fixed hours: ``30 2 * * *`` runs once that night, not twice. A
    schedule of every hour or every few hours (``*/5 * * * *``, ``0 */2 * * *``) runs through
    both passes."""
    local = dt.datetime.fromtimestamp(at, zone)
    if not local.fold or local.replace(fold=0).timestamp() == at:
        return False
    return not schedule.split()[-4].startswith("*")


def next_time(schedule: str, zone: zoneinfo.ZoneInfo, after: float) -> float:
    """The first scheduled time strictly after `after` (seconds since the epoch)."""
    times = _iterator(schedule, zone, after)
    while _repeat(schedule, zone, found := float(times.get_next(float))):
        pass
    return found


def latest_time(schedule: str, zone: zoneinfo.ZoneInfo, at: float) -> float:
    """The last scheduled time at or before `at`."""
    times = _iterator(schedule, zone, at)
    while _repeat(schedule, zone, found := float(times.get_prev(float))):
        pass
    following = next_time(schedule, zone, found)
    return following if following <= at else found


# The fields of a 5-field expression and the values each takes (a 6-field one has seconds first).
CRON_FIELD_RANGES: tuple[tuple[str, str], ...] = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or jan-dec"),
    ("day-of-week", "0-7 or sun-sat"),
)


def _bad_field(schedule: str) -> str | None:
    """What is wrong with a 5- or 6-field expression croniter refuses: its first field that is
    refused with every other field `*` (croniter's own message names no field)."""
    parts = schedule.split()
    named = ((("second", "0-59"),) if len(parts) == 6 else ()) + CRON_FIELD_RANGES
    for index, (name, values) in enumerate(named):
        alone = ["*"] * len(parts)
        alone[index] = parts[index]
        if not croniter.is_valid(" ".join(alone), second_at_beginning=len(parts) == 6):
            return (
                f"the {name} field (field {index + 1}) '{echo(parts[index])}' is not valid: "
                f"it takes {values}"
            )
    return None


def check_schedule(value: Any, zone: zoneinfo.ZoneInfo, min_interval: float) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad("parameter 'schedule' must be a cron expression such as '0 9 * * 1-5'")
    schedule = " ".join(value.split())
    if len(schedule) > 200:
        raise _bad("parameter 'schedule' is longer than 200 characters")
    fields = len(schedule.split())
    if fields not in (5, 6):
        raise _bad(
            f"parameter 'schedule': '{echo(schedule)}' is not a cron expression of 5 fields "
            "(minute hour day-of-month month day-of-week) or 6 (seconds first)"
        )
    if not croniter.is_valid(schedule, second_at_beginning=fields == 6):
        field = _bad_field(schedule)
        where = f"in '{echo(schedule)}', {field}" if field else f"'{echo(schedule)}' is not valid"
        raise _bad(f"parameter 'schedule': {where}")
    try:
        times = _iterator(schedule, zone, time.time())
        runs = [float(times.get_next(float)) for _ in range(INTERVAL_SAMPLES)]
    except Exception as exc:  # croniter's "no match" for impossible dates (Feb 30)
        raise _bad(f"parameter 'schedule': '{echo(schedule)}' never runs ({exc})") from None
    shortest = min(b - a for a, b in zip(runs, runs[1:], strict=False))
    if shortest < min_interval:
        raise _bad(
            f"parameter 'schedule': '{echo(schedule)}' runs {shortest:g} s apart; the shortest "
            f"interval is {min_interval:g} s ([server.crons] min_interval)"
        )
    return schedule


def check_timezone(value: Any) -> zoneinfo.ZoneInfo:
    if value is None:
        return zoneinfo.ZoneInfo("UTC")
    if not isinstance(value, str) or len(value) > 64:
        raise _bad("parameter 'timezone' must be an IANA time zone name such as 'Europe/Paris'")
    try:
        if value in SERVER_ZONES:
            raise ValueError(value)
        return zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise _bad(
            f"parameter 'timezone': unknown IANA time zone '{echo(value)}' "
            "(e.g. 'UTC', 'Europe/Paris', 'America/New_York')"
        ) from None


def run_series(cron_id: str) -> str:
    """How the task ids of a cron's runs start: a UUID (version 8) of a hash of the cron id,
    less its last group (``xxxxxxxx-xxxx-8xxx-yxxx-``), which a run fills with its time."""
    bits = int.from_bytes(hashlib.sha256(cron_id.encode()).digest()[:16], "big")
    bits = bits & ~(0xF << 76) & ~(0x3 << 62) | (0x8 << 76) | (0x2 << 62)
    return str(uuid.UUID(int=bits))[:SERIES_CHARS]


def run_task_id(cron_id: str, scheduled: float) -> str:
    """The task id of a cron's run at `scheduled` (milliseconds): the same on every front end."""
    return f"{run_series(cron_id)}{round(scheduled * 1000) % (1 << 48):012x}"


def cron_view(sub: Mapping[str, Any]) -> Record:
    """What callers see of a cron: never its webhook's secret."""
    spec = sub["push_auth"] or {}
    hook = spec.get("webhook")
    return {
        "id": sub["subscription_id"],
        "schedule": spec.get("schedule"),
        "timezone": spec.get("timezone"),
        "message": spec.get("message"),
        "webhook": {"url": hook["url"], "events": hook["events"]} if hook else None,
        "description": sub["description"],
        "paused": not sub["active"],
        "next_run": None if not sub["active"] else _iso(spec.get("next_run")),
        "last_run": _iso(spec.get("last_run")),
        "last_task_id": spec.get("last_task_id"),
        "last_error": spec.get("last_error"),
        "runs": int(spec.get("runs") or 0),
        "created_at": _iso(sub["created_at"]),
        "updated_at": _iso(spec.get("changed_at", sub["created_at"])),
        "owner": {"role": sub["owner_role"], "id": sub["owner_id"]},
    }


def _shown(sub: Record, body: Mapping[str, Any], hook: dict[str, Any] | None) -> Record:
    """`cron_view`, with the secret of the webhook this request set (`hook`) when the server
    made it: shown once, as webhooks' are."""
    view = cron_view(sub)
    given = body.get("webhook")
    if hook is not None and not (isinstance(given, dict) and given.get("secret")):
        view["webhook"]["secret"] = hook["secret"]
    return view


# -- the service ----------------------------------------------------------------------------
class CronScheduler:
    """One per server process: ``/crons``' handlers and the loop that starts due runs."""

    def __init__(
        self,
        cfg: CronsConfig,
        store: Any,
        state: ServerState,
        *,
        own_store: bool,
        backend: InstanceBackend | None = None,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.state = state
        self.backend = backend  # cluster mode: runs start in the caller's instance host
        self.swarm_name = state.swarm_name
        self._own_store = own_store
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._own_store:
            await self.store.start()
        self._loop_task = asyncio.create_task(self._run(), name="mail-crons")

    async def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        if self._own_store:
            await self.store.close()

    # -- checks -------------------------------------------------------------------------
    def _message(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _bad('parameter \'message\' must be an object such as {"body": "..."}')
        check_fields(value, MESSAGE_FIELDS, "message.", HTTPException)
        size = len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > self.cfg.max_message_bytes:
            raise HTTPException(
                413,
                f"parameter 'message' is {size} bytes; the limit is "
                f"{self.cfg.max_message_bytes} ([server.crons] max_message_bytes)",
            )
        try:
            parse_message_request(dict(value))
        except HTTPException as exc:
            raise _bad(f"parameter 'message': {exc.detail}") from None
        return dict(value)

    async def _webhook(self, value: Any) -> dict[str, Any] | None:
        if value is None:
            return None
        service = getattr(self.state, "webhooks", None)
        if service is None:
            raise HTTPException(
                400, "parameter 'webhook': webhooks are off on this server ([server.webhooks])"
            )
        spec = {"url": value} if isinstance(value, str) else value
        try:
            url, events, secret = await service.check_request_webhook(spec)
        except WebhookError as exc:
            raise HTTPException(exc.status, exc.detail) from None
        return {"url": url, "events": events, "secret": secret}

    def _description(self, value: Any) -> str:
        return check_description(value, self.cfg.max_description_chars, "crons", HTTPException)

    @staticmethod
    def _paused(value: Any) -> bool:
        if not isinstance(value, bool):
            raise _bad("parameter 'paused' must be true or false")
        return value

    async def _owned(self, owner: Owner, cron_id: str) -> Record:
        sub = await self.store.get_subscription(cron_id)
        if (
            sub is None
            or sub["kind"] != KIND
            or sub["swarm_name"] != self.swarm_name
            or (sub["owner_role"], sub["owner_id"]) != owner
        ):
            raise HTTPException(404, f"no scheduled task '{echo(cron_id)}'")
        return sub  # type: ignore[no-any-return]

    # -- handlers -----------------------------------------------------------------------
    async def create(self, owner: Owner, api_key: str, body: Mapping[str, Any]) -> Record:
        check_fields(body, CRON_FIELDS, fail=HTTPException)
        for required in ("schedule", "message"):
            if body.get(required) is None:
                raise _bad(f"parameter '{required}' is required")
        zone = check_timezone(body.get("timezone"))
        schedule = check_schedule(body["schedule"], zone, self.cfg.min_interval)
        message = self._message(body["message"])
        hook = await self._webhook(body.get("webhook"))
        paused = self._paused(body.get("paused", False))
        now = time.time()
        spec = {
            "schedule": schedule,
            "timezone": zone.key,
            "message": message,
            "webhook": hook,
            "next_run": next_time(schedule, zone, now),
            "last_run": None,
            "last_task_id": None,
            "last_error": None,
            "runs": 0,
            "changed_at": now,
        }
        sub = new_subscription(
            self.swarm_name,
            owner,
            KIND,
            hook["url"] if hook else "",
            [],
            subscription_id=new_id("cron"),
            destination="",
            description=self._description(body.get("description")),
            active=not paused,
            secret=api_key,  # loads the owner's instance for a run when it is not loaded
            push_auth=spec,
            created_at=now,
            updated_at=now,
        )
        limit = self.cfg.max_crons_per_caller
        bound = Bound(
            ("owner_role", "owner_id", "kind"),
            limit,
            "you already have {count} scheduled tasks, the most one caller may have "
            f"([server.crons] max_crons_per_caller = {limit}); delete one first",
        )
        try:
            stored = await self.store.add_subscription(sub, bounds=[bound])
        except OverQuota as exc:
            raise HTTPException(429, str(exc)) from None
        self._wake.set()
        logger.info("crons: %s:%s scheduled %s (%s)", *owner, sub["subscription_id"], schedule)
        return _shown(stored, body, hook)

    async def list_for(self, owner: Owner) -> list[Record]:
        subs = await self.store.list_subscriptions(self.swarm_name, owner=owner, kinds=[KIND])
        return [cron_view(s) for s in subs]

    async def get(self, owner: Owner, cron_id: str) -> Record:
        return cron_view(await self._owned(owner, cron_id))

    async def update(
        self, owner: Owner, api_key: str, cron_id: str, body: Mapping[str, Any]
    ) -> Record:
        check_fields(body, CRON_FIELDS, fail=HTTPException)
        for attempt in range(UPDATE_ATTEMPTS):
            sub = await self._owned(owner, cron_id)
            spec = dict(sub["push_auth"] or {})
            zone = check_timezone(body.get("timezone", spec.get("timezone")))
            changes: Record = {"secret": api_key}
            timing = False
            if "schedule" in body or "timezone" in body:
                spec["schedule"] = check_schedule(
                    body.get("schedule", spec["schedule"]), zone, self.cfg.min_interval
                )
                spec["timezone"] = zone.key
                timing = True
            if "message" in body:
                spec["message"] = self._message(body["message"])
            if "webhook" in body:
                spec["webhook"] = await self._webhook(body["webhook"])
                changes["url"] = spec["webhook"]["url"] if spec["webhook"] else ""
            if "description" in body:
                changes["description"] = self._description(body["description"])
            if "paused" in body:
                paused = self._paused(body["paused"])
                timing = timing or (not paused and not sub["active"])  # resumed: from now on
                changes["active"] = not paused
            now = time.time()
            if timing:
                spec["next_run"] = next_time(spec["schedule"], zone, now)
            spec["changed_at"] = now
            changes["push_auth"] = spec
            updated = await self.store.update_subscription(
                cron_id, changes, expect={"updated_at": sub["updated_at"]}
            )
            if updated is not None:
                self._wake.set()
                hook = spec.get("webhook") if "webhook" in body else None
                if "webhook" in body:  # the next run makes the new one
                    await self._drop_webhook(owner, cron_id, hook["url"] if hook else None)
                return _shown(updated, body, hook)
            logger.debug("crons: update of %s raced a run (attempt %d)", cron_id, attempt + 1)
        raise HTTPException(409, "the scheduled task changed meanwhile; send the update again")

    async def delete(self, owner: Owner, cron_id: str) -> None:
        await self._owned(owner, cron_id)
        await self.store.delete_subscription(cron_id)
        self._wake.set()
        await self._drop_webhook(owner, cron_id)

    async def _drop_webhook(self, owner: Owner, cron_id: str, keep_url: str | None = None) -> None:
        """Delete the subscription of the cron's runs (with its deliveries), unless it is
        `keep_url`'s."""
        service = getattr(self.state, "webhooks", None)
        if service is None:
            return
        subs = await self.store.list_subscriptions(
            self.swarm_name, owner=owner, kinds=["request"], task_id=run_series(cron_id)
        )
        for sub in subs:
            if sub["url"] != keep_url:
                with contextlib.suppress(WebhookError):  # deleted meanwhile
                    await service.delete(owner, sub["subscription_id"])

    # -- the scheduler ------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            wake = time.time() + self.cfg.rescan_interval
            try:
                subs = await self.store.list_subscriptions(self.swarm_name, kinds=[KIND])
            except Exception as exc:  # the database is away: try again soon
                logger.warning("crons: cannot read the schedules: %s", exc)
                subs, wake = [], min(wake, time.time() + RETRY_READ)
            now = time.time()
            fired = False
            for sub in subs:
                due = (sub["push_auth"] or {}).get("next_run")
                if not sub["active"] or due is None:
                    continue
                if due <= now:
                    try:
                        await self._fire(sub, now)
                        fired = True
                    except Exception:
                        logger.exception("crons: run of %s failed", sub["subscription_id"])
                        wake = min(wake, now + 1.0)  # not at once: the database may be away
                else:
                    wake = min(wake, due)
            if fired:
                continue  # read them again: their next runs moved
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, wake - time.time()))

    async def _fire(self, sub: Record, now: float) -> None:
        """Claim `sub`'s due time (compare-and-set on the stored cron) and start its run."""
        spec = dict(sub["push_auth"])
        zone = zoneinfo.ZoneInfo(spec["timezone"])
        latest = latest_time(spec["schedule"], zone, now)
        runs = now - latest <= self.cfg.catch_up_window and latest >= spec["next_run"]
        spec["next_run"] = next_time(spec["schedule"], zone, now)
        task_id = run_task_id(sub["subscription_id"], latest)
        if runs:
            spec.update(last_run=latest, last_task_id=task_id, last_error=None)
            spec["runs"] = int(spec.get("runs") or 0) + 1
        claimed = await self.store.update_subscription(
            sub["subscription_id"], {"push_auth": spec}, expect={"updated_at": sub["updated_at"]}
        )
        if claimed is None:
            return  # another front end took this time (or the cron changed): not ours
        if not runs:
            logger.info(
                "crons: %s missed %s, older than the catch-up window: skipped",
                sub["subscription_id"],
                _iso(latest),
            )
            return
        before = sub["push_auth"]
        try:
            await self._start(claimed, task_id)
        except HTTPException as exc:
            await self._note_error(claimed, before, f"{exc.status_code}: {exc.detail}")
        except Exception as exc:
            await self._note_error(claimed, before, str(exc) or type(exc).__name__)
            raise

    async def _start(self, sub: Record, task_id: str) -> None:
        from mail.server.messaging import background_message  # (it imports the server's state)
        from mail.server.webhooks import owner_of, request_webhook

        spec = sub["push_auth"]
        try:
            caller = await self.state.auth.authenticate(sub["secret"] or "")
        except HTTPException as exc:
            if exc.status_code not in (401, 403):
                raise  # the auth service is away: this time is lost, the next one tries
            raise HTTPException(
                401,
                "the API key that created or last changed this scheduled task no longer "
                "works (revoked?): change the task with a key of yours to run it again",
            ) from None
        if owner_of(caller) != (sub["owner_role"], sub["owner_id"]):
            raise HTTPException(403, "the key of this scheduled task now names another caller")
        if spec.get("webhook"):  # before the run: its events go there
            series = run_series(sub["subscription_id"])
            await request_webhook(self.state, caller, series, dict(spec["webhook"]))
            # A delete or a new URL since the claim dropped the webhook before this made it
            # again: drop it now (whichever comes second sees the other).
            now = await self.store.get_subscription(sub["subscription_id"])
            hook = (now["push_auth"] or {}).get("webhook") if now is not None else None
            if hook is None or hook["url"] != spec["webhook"]["url"]:
                owner = (sub["owner_role"], sub["owner_id"])
                await self._drop_webhook(owner, sub["subscription_id"], hook and hook["url"])
        body: dict[str, Any] = {**spec["message"], "task_id": task_id, "background": True}
        if self.backend is None:
            await background_message(self.state, caller, parse_message_request(body))
        else:  # as a `POST /message` through a front end: in the caller's one instance
            await self._forward(caller, body)
        logger.info("crons: %s started task %s", sub["subscription_id"], task_id)

    async def _forward(self, caller: Caller, body: dict[str, Any]) -> None:
        assert self.backend is not None
        request = ForwardedRequest(
            "POST",
            "/message",
            headers=[
                (b"authorization", f"Bearer {caller.api_key}".encode()),
                (b"content-type", b"application/json"),
            ],
            body=json.dumps(body).encode(),
        )
        try:
            reply = await self.backend.unary(self.swarm_name, caller, request)
        except Exception as exc:
            if not self.backend.unavailable(exc):
                raise
            raise HTTPException(
                503, "the node of the caller's instance failed: this time's run did not start"
            ) from None
        if reply.status >= 300:
            try:
                detail = json.loads(reply.body)["detail"]
            except (ValueError, KeyError, TypeError):
                detail = reply.body.decode("utf-8", "replace")
            raise HTTPException(reply.status, detail)

    async def _note_error(self, sub: Record, before: Mapping[str, Any], error: str) -> None:
        """Record why the run was refused: it started nothing, so it is taken off `runs`,
        and `last_task_id` goes back to the task of the latest run that did start (unless a
        later time's run took its place). A change made meanwhile (another front end's next
        time, a PATCH) is read again: the note is made on what the cron holds now."""
        logger.warning("crons: run of %s refused: %s", sub["subscription_id"], error)
        cron_id, ours = sub["subscription_id"], sub["push_auth"].get("last_task_id")
        for _ in range(_NOTE_TRIES):
            spec = dict(sub["push_auth"])
            spec["last_error"] = error[:500]
            spec["runs"] = max(0, int(spec.get("runs") or 0) - 1)
            if spec.get("last_task_id") == ours:
                spec["last_task_id"] = before.get("last_task_id")
            noted = await self.store.update_subscription(
                cron_id, {"push_auth": spec}, expect={"updated_at": sub["updated_at"]}
            )
            if noted is not None:
                return
            current = await self.store.get_subscription(cron_id)
            if current is None:
                return  # deleted meanwhile
            sub = current


async def start_crons(
    state: ServerState, backend: InstanceBackend | None = None
) -> CronScheduler | None:
    """The started scheduler of a server (None when [server.crons] enabled = false);
    `backend`: a cluster front end's, where the runs start."""
    cfg = state.config.crons
    if not cfg.enabled:
        return None
    service = getattr(state, "webhooks", None)
    if service is not None:
        scheduler = CronScheduler(cfg, service.store, state, own_store=False, backend=backend)
    else:
        from mail.server.webhooks import subscription_store

        store = subscription_store(state.store)
        scheduler = CronScheduler(cfg, store, state, own_store=True, backend=backend)
    await scheduler.start()
    return scheduler
