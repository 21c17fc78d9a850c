"""How a pipeline's daily partitions are run: ranges of days, the days of a run, and how many days one run of a
backfill covers. Which days they are is the pipeline's calendar (calendar.py)."""

from collections.abc import Mapping, Sequence
from datetime import date, timedelta

from dagster import AssetExecutionContext, BackfillPolicy

from resources.settings import settings


def max_partitions_per_run() -> int:
    return settings().backfill_max_partitions_per_run


def bytes_by_day(batch_bytes: Mapping[date, int], first: date) -> list[float]:
    """What each day holds, from the landing's batches alone (sizes, no read): a batch holds the days since the batch
    before it (the first batch, the days from `first`), its bytes spread evenly over them. Daily batches give each day
    its batch; a batch carrying a bulk history gives each of its days a share, not the whole."""
    found: list[float] = []
    previous = first - timedelta(days=1)
    for batch in sorted(batch_bytes):
        covered = max(1, (batch - previous).days)
        found += [batch_bytes[batch] / covered] * covered
        previous = max(previous, batch)
    return found


def days_per_run(day_bytes: Sequence[float], max_bytes: int, max_days: int) -> int:
    """How many days one run of a backfill covers, from what the days hold (`bytes_by_day`): the most consecutive
    days whose landed bytes stay within `max_bytes` wherever the run falls, at least one day, at most `max_days`. A
    history that fits is one run; one ten times larger is cut into runs that each read what one fitting run reads."""
    if not day_bytes or sum(day_bytes) <= max_bytes:
        return max_days
    sums = [0.0]
    for size in day_bytes:
        sums.append(sums[-1] + size)

    def fits(n: int) -> bool:
        return max(sums[i + n] - sums[i] for i in range(len(day_bytes) - n + 1)) <= max_bytes

    low, high = 1, min(max_days, len(day_bytes))  # the largest n that fits, or one day
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def days(start: date, end: date) -> list[date]:
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def chunks(start: date, end: date, size: int | None = None) -> list[tuple[date, date]]:
    """Consecutive ranges of at most `size` days covering start..end, as a backfill runs them."""
    size = size or max_partitions_per_run()
    all_days = days(start, end)
    return [(c[0], c[-1]) for c in (all_days[i : i + size] for i in range(0, len(all_days), size))]


def backfill_policy(days: int) -> BackfillPolicy:
    """A range backfill runs as a few runs of up to `days` days each, never one run per day."""
    return BackfillPolicy.multi_run(max_partitions_per_run=days)


def run_days(context: AssetExecutionContext) -> list[date]:
    """The days a run materializes: one partition or a range (by key: a day of a daylight-saving change is 23 or 25
    hours long in its timezone)."""
    keys = context.partition_key_range
    return days(date.fromisoformat(keys.start), date.fromisoformat(keys.end))
