"""Which days a restatement rewrites, decided without reading a table: which batches to read, where the restatement
window starts, which changed days are restated, which are too old to be, which are held since a rollback."""

from dataclasses import dataclass, replace
from datetime import date, timedelta

from exact_backfills.dependencies import DayChange
from resources import control


def read_name(source: str, batch: str) -> str:
    """A batch as the watermark records it read."""
    return f"{source}/{batch}"


def batches_to_read(source: str, landed: list[str], wm: control.Watermark, reprocess: timedelta) -> list[str]:
    """The landed batches of `source` a restatement reads: every one never read, and the ones landed since the
    watermark minus the reprocess window."""
    since = (wm.watermark_ts - reprocess).date() if wm.watermark_ts else None
    seen = set(wm.batches_read)
    return [
        b for b in landed if read_name(source, b) not in seen or (since is not None and date.fromisoformat(b) >= since)
    ]


def window_start(landed: list[str], window_days: int) -> date | None:
    """The first day a restatement rewrites: the window counts back from the newest landed batch, not the clock."""
    return date.fromisoformat(max(landed)) - timedelta(days=window_days) if landed else None


@dataclass
class DaysToRestate:
    days: dict[str, dict[date, DayChange]]  # table -> its days to restate
    outside: dict[str, dict[date, DayChange]]  # staging table -> its days older than the window: exceptions
    held: dict[date, DayChange]  # held since a rollback: left as they are, every table's change of the day merged


def _merge(into: dict[date, DayChange], day: date, change: DayChange) -> None:
    into[day] = into[day].plus(change) if day in into else change


def in_window(
    changed: dict[str, dict[date, DayChange]], start: date | None
) -> tuple[dict[str, dict[date, DayChange]], dict[str, dict[date, DayChange]]]:
    """The staging tables' changed days split: (in the window, older than the window)."""
    inside: dict[str, dict[date, DayChange]] = {}
    outside: dict[str, dict[date, DayChange]] = {}
    for table, days in changed.items():
        inside[table] = {d: c for d, c in days.items() if start is None or d >= start}
        old = {d: c for d, c in days.items() if start is not None and d < start}
        if old:
            outside[table] = old
    return inside, outside


def classify_days(
    stale: dict[str, dict[date, DayChange]],
    outside: dict[str, dict[date, DayChange]],
    pending: dict[str, list[date]],
    held_days: set[date],
) -> DaysToRestate:
    """Sort the stale days: a day left pending by an interrupted restatement is rewritten again whatever its age (and
    is no exception); a day held since a rollback is left as it is, whatever else it is."""
    days = {t: dict(d) for t, d in stale.items()}
    old = {t: dict(d) for t, d in outside.items()}
    for table, pending_days in pending.items():
        for day in pending_days:
            days.setdefault(table, {})[day] = replace(days.get(table, {}).get(day, DayChange()), pending=True)
            if day in old.get(table, {}):
                days[table][day] = days[table][day].plus(old[table].pop(day))
    held: dict[date, DayChange] = {}
    for place in (*days.values(), *old.values()):
        for day in [d for d in place if d in held_days]:
            _merge(held, day, place.pop(day))
    return DaysToRestate(days, {t: d for t, d in old.items() if d}, held)


def held_landings(changed: dict[str, dict[date, DayChange]], held_days: set[date]) -> dict[date, DayChange]:
    """Day -> what landed for it since, on the days held since a rollback: the sources' changes of the day (each
    staging table's once), not the copies the tables built from them carry."""
    found: dict[date, DayChange] = {}
    for changes in changed.values():
        for day, change in changes.items():
            if day in held_days:
                _merge(found, day, change)
    return found
