"""Real Spark, real Delta, a real Dagster instance: one Spark session for the whole test session."""

import os
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The tests' partitions (read when assets_pkg is imported): pinned so a developer's environment cannot change them.
os.environ.update(
    {"PARTITION_START_DATE": "2025-01-01", "PARTITION_END_DATE": "2025-03-31", "BACKFILL_MAX_PARTITIONS_PER_RUN": "31"}
)

from assets_pkg.backfill import dagster_instance  # noqa: E402
from assets_pkg.tables import TABLES  # noqa: E402
from resources.delta_io import history, read_table  # noqa: E402
from resources.lake import table_path
from resources.spark import get_spark

# The property tests' profiles: `ci` by default, `--hypothesis-profile soak` for a long run. Each example builds a
# lake on real Spark, Delta and Dagster: no deadline, and the health checks for slow examples off.
_EXAMPLES = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("ci", max_examples=2, **_EXAMPLES)
settings.register_profile("soak", max_examples=40, **_EXAMPLES)
settings.load_profile("ci")

TABLE_KEYS = {t.name: t.key for t in TABLES}

# The longest modules first, so that neither of scripts/test.sh's two workers is left alone with one at the end; a
# module that drives the daemon beside one that mostly computes.
_LONGEST_FIRST = ["test_ui.py", "test_late_data.py", "test_equivalence.py", "test_cluster_profile.py", "test_reliability.py", "test_faults.py"]


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: _LONGEST_FIRST.index(item.path.name) if item.path.name in _LONGEST_FIRST else len(_LONGEST_FIRST))


@contextmanager
def environment(**values: str):
    """The process's environment with `values` set, restored afterwards (settings are read on every call)."""
    previous = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def spark():
    return get_spark()


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """A fresh, empty lake (LAKE_ROOT) and Dagster instance for one test module."""
    root = tmp_path_factory.mktemp("lake")
    with environment(LAKE_ROOT=str(root), DAGSTER_HOME=str(root / "dagster_home")):
        with dagster_instance() as instance:  # configured by the project's dagster.yaml, as users get it
            yield root, instance


def rows(spark, table):
    """Every row of a table, by column name, sorted: the table's whole content, for exact comparisons (without the
    run that wrote a row, which quarantine records)."""
    found = [r.asDict() for r in read_table(spark, table).drop("run_id").collect()]
    return sorted(found, key=lambda row: repr(sorted(row.items())))


def files_by_day(spark, table, day_column):
    """The table's live data files, grouped by the day partition folder they sit in."""
    by_day = defaultdict(set)
    for f in read_table(spark, table).inputFiles():
        part = next(p for p in Path(f).parts if p.startswith(f"{day_column}="))
        by_day[part.split("=", 1)[1]].add(f)
    return dict(by_day)


def versions(spark, table):
    return [r.version for r in history(spark, table_path(table))]


def duplicate_keys(spark, table):
    keys = TABLE_KEYS[table]
    return read_table(spark, table).groupBy(*keys).count().where("count > 1").count()


def from_scratch(spark, tmp_path, start, end, view=None):
    """Every table's rows as a from-scratch backfill of start..end over a copy of this lake's landing builds them, in
    a lake and a Dagster instance of its own (or `view(spark)` of that lake)."""
    import shutil

    from dagster import DagsterInstance

    from assets_pkg.backfill import run_backfill
    from assets_pkg.tables import DAY_COLUMN
    from resources.lake import lake_root

    scratch = tmp_path / "scratch"
    shutil.copytree(lake_root() / "landing", scratch / "landing")
    with environment(LAKE_ROOT=str(scratch)), DagsterInstance.ephemeral() as instance:
        assert run_backfill(start, end, chunk_size=366, instance=instance, echo=lambda _: None)
        return view(spark) if view else {t: rows(spark, t) for t in DAY_COLUMN}
