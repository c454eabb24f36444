"""Cron schedules, as a CronJob's ``spec.schedule`` reads (the cron library ``croniter``):
the grammar Kubernetes accepts (five fields, or a descriptor such as ``@hourly``) and the
times a schedule gives in a time zone."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import CroniterError, croniter

_DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight",
                "@hourly")


def schedule_error(schedule: str) -> str | None:
    """Why ``schedule`` is not a standard cron schedule (None when it is)."""
    text = schedule.strip()
    if text.startswith("@"):
        if text in _DESCRIPTORS:
            return None
        return (f"unrecognized descriptor {text!r}: use five fields or one of "
                f"{', '.join(_DESCRIPTORS)}")
    fields = text.split()
    if len(fields) != 5:
        return (f"expected exactly 5 fields (minute hour day-of-month month day-of-week), "
                f"found {len(fields)}: {schedule!r}")
    if not croniter.is_valid(text):
        return f"{schedule!r} is not a valid cron schedule"
    return None


def latest_time(schedule: str, zone: str, *, after: datetime, until: datetime) -> datetime | None:
    """The latest time the schedule gives in (``after``, ``until``], or None."""
    try:
        previous = croniter(schedule.strip(), until.astimezone(ZoneInfo(zone)))
        moment: datetime = previous.get_prev(datetime)
    except (CroniterError, KeyError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(zone))
    # get_prev is strictly before its start: a time equal to ``until`` is the latest one.
    following: datetime = croniter(schedule.strip(), moment).get_next(datetime)
    if following <= until:
        moment = following
    return moment if moment > after else None


def next_time(schedule: str, zone: str, *, after: datetime) -> datetime | None:
    """The first time the schedule gives after ``after``."""
    try:
        moment: datetime = croniter(schedule.strip(), after.astimezone(ZoneInfo(zone))).get_next(
            datetime)
    except (CroniterError, KeyError):
        return None
    return moment
