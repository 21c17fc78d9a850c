"""Real Spark, real Delta, a real Dagster instance: one Spark session for the whole test session. Only pytest's
configuration, hooks and fixtures; the helpers are in tests/support."""

import pytest
from hypothesis import HealthCheck, settings

from exact_backfills.backfill import dagster_instance
from resources.spark import get_spark
from tests.support.lake import environment

# The property tests' profiles: `ci` by default, `--hypothesis-profile soak` for a long run. Each example builds a
# lake on real Spark, Delta and Dagster: no deadline, and the health checks for slow examples off.
_EXAMPLES = dict(
    deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
settings.register_profile("ci", max_examples=2, **_EXAMPLES)
settings.register_profile("soak", max_examples=40, **_EXAMPLES)
settings.load_profile("ci")

# The longest modules first, so that none of scripts/test.sh's workers is left alone with one at the end; a module
# that drives the daemon beside one that mostly computes. Then the quick loop's (-m "not slow") modules that start
# Spark, one per worker, so that their JVMs start at once and the other modules fill in around them.
_LONGEST_FIRST = [
    "test_ml_stretch.py",
    "test_ui.py",
    "test_late_data.py",
    "test_live.py",
    "test_code_changes.py",
    "test_bench.py",
    "test_equivalence.py",
    "test_ml_features.py",
    "test_your_pipeline.py",
    "test_cluster_profile.py",
    "test_object_store.py",
    "test_reliability.py",
    "test_faults.py",
    "test_cli.py",
    "test_transforms.py",
    # The middle-sized ones before the many small ones, which then fill the end.
    "test_engine.py",
    "test_backfill.py",
    "test_landing_contract.py",
    "test_publish.py",
    "test_tpch.py",
    "test_retention.py",
    "test_declarations.py",
]


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        name = item.path.name
        return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)


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
