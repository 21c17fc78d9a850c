"""Which published days a code change makes stale, in every table: the days a table's older code built, and the days
of every table built from them. Pure: it decides from what each day was built by and the code loaded now."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

from assets_pkg.tables import BY_NAME, PUBLISH_ORDER, Role


@dataclass(frozen=True)
class CodeChange:
    """Why a day is stale by code: the code of `table` (the day's own table, or one it is built from) changed."""

    table: str
    built_by: str | None  # the version of `table`'s code that built the day (None: not recorded)
    current: str

    def describe(self) -> str:
        return f"{self.table}: code changed ({self.built_by or 'unrecorded'} → {self.current})"


def stale_by_code(
    built_by: Mapping[str, Mapping[date, str | None]], current: Mapping[str, str]
) -> dict[str, dict[date, CodeChange]]:
    """Table -> its published days stale by code, each with why. `built_by`: table -> published day -> the code version
    that built it; `current`: table -> its code version now. A day of a table built from a stale day of another is
    stale too: the same day of a table built by order day, every later day of a table that reads a dimension as of
    the day."""
    stale: dict[str, dict[date, CodeChange]] = {}
    for table in PUBLISH_ORDER:
        published = built_by.get(table, {})
        days: dict[date, CodeChange] = {}
        for upstream in BY_NAME[table].upstream:
            changed = stale.get(upstream)
            if not changed:
                continue
            if BY_NAME[upstream].role is Role.DIMENSION:  # versions by the day they take effect: every day after
                since = min(changed)
                days.update({d: changed[since] for d in published if d >= since and d not in days})
            else:
                days.update({d: changed[d] for d in published if d in changed and d not in days})
        own = {d: CodeChange(table, v, current[table]) for d, v in published.items() if v != current[table]}
        stale[table] = {**days, **own}  # a day its own code built stale says so first
    return stale
