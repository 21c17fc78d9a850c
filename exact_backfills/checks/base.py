"""What every check is: a name, whether it blocks a write, its severity and description (`Check`), and its result on a
day (`Outcome`) carrying a typed record of what it found (`Record`), which Dagster shows as the result's metadata.
Each family of checks (keys.py, reconcile.py, ...) declares its `Check`s, its record and the constructors of its
outcomes; results.py alone turns outcomes into Dagster's check results."""

from dataclasses import asdict, dataclass
from datetime import date
from typing import Any, ClassVar, Protocol

from dagster import AssetCheckSeverity

# In a result's metadata: why the check could not be evaluated, or why the user's check raised.
ERROR = "error"
SAMPLE_SIZE = 5


class CheckRecord(Protocol):
    """What a check found on a day, as the metadata of its result."""

    def metadata(self) -> dict[str, Any]: ...

    def summary(self) -> str: ...


@dataclass(frozen=True)
class Record:
    """A family's record: its fields are the result's metadata keys (a field left None is not shown). `SUMMARY` names
    the fields a failing result's one line shows, in that order, when they say something (not empty, not zero)."""

    SUMMARY: ClassVar[tuple[str, ...]] = ()

    def metadata(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def summary(self) -> str:
        shown = self.metadata()
        return ", ".join(f"{k}={shown[k]}" for k in self.SUMMARY if shown.get(k) not in (None, "", 0))


@dataclass(frozen=True)
class NotEvaluated(Record):
    """A check that could not run: it failed, saying why."""

    error: str
    evaluated: bool = False

    def summary(self) -> str:
        return self.error


@dataclass(frozen=True)
class Outcome:
    """A check's result on a day."""

    check: str
    day: date
    passed: bool
    record: CheckRecord
    blocking: bool = False
    severity: AssetCheckSeverity = AssetCheckSeverity.WARN

    @property
    def metadata(self) -> dict[str, Any]:
        return self.record.metadata()

    @property
    def evaluated(self) -> bool:
        return not isinstance(self.record, NotEvaluated)


@dataclass(frozen=True)
class Check:
    """A check as Dagster declares it; `outcome` makes its result on a day."""

    name: str
    description: str
    blocking: bool = False
    error_when_failing: bool = False  # a failure is an error though the check does not block

    @property
    def severity(self) -> AssetCheckSeverity:
        return AssetCheckSeverity.ERROR if self.blocking or self.error_when_failing else AssetCheckSeverity.WARN

    def outcome(self, day: date, passed: bool, record: CheckRecord) -> Outcome:
        return Outcome(self.name, day, passed, record, self.blocking, self.severity)

    def not_evaluated(self, day: date, error: BaseException) -> Outcome:
        """Failed on the day, saying why it could not run: a check that did not run never passes."""
        return self.outcome(day, False, NotEvaluated(f"could not be evaluated: {error_line(error)}"))


def error_line(error: BaseException) -> str:
    """An error as one line: its class and the first line of its message (Spark's carry a long plan after it)."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def summary(o: Outcome) -> str:
    """One line a person can act on: the numbers that made the check fail (a user check's: its figures)."""
    return o.record.summary()
