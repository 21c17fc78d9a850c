"""The benchmark harness works end to end, as a user runs it: at a tiny scale, every step (the TPC-H import, the bare
job, the UI's backfill, the sensor's restatement of a late batch, a short run, a 3-day restatement and an idle one, a
code change planned and promoted) runs and reports its figures, and the report renders them. The peers' build is
left out: it checks itself against the bare job whenever the bench runs it. Its times are printed,
never checked: a benchmark, not a timed test."""

import json
import subprocess
import sys

import pytest

from bench.report import DERIVED, ROWS
from resources.lake import REPO_ROOT
from resources.settings import settings

pytestmark = pytest.mark.slow  # a small lake, `dagster dev` and every step of the bench in processes of their own


def test_the_bench_runs_every_step_at_a_tiny_scale_and_its_report_shows_every_figure(tmp_path):
    out, lake = tmp_path / "bench-tiny.json", tmp_path / "lake"
    tiny = ["--scale", "0.01", "--days", "10", "--no-peers", "--lake", str(lake)]
    # On the tests' warm engine: a cold one of the bench's own spent half its CPU compiling its code (JIT), on cores
    # the other tests share.
    tiny += ["--shared-engine", settings().spark_engine_home]

    bench = subprocess.run(
        [sys.executable, "bench/run.py", *tiny, "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-3000:]
    report = subprocess.run(
        [sys.executable, "bench/report.py", "--print", "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert report.returncode == 0, report.stderr
    figures = json.loads(out.read_text())
    missing = [key for key, _, _ in ROWS if key not in DERIVED and figures.get(key) is None]
    assert missing == [], missing
    # Nothing new: the sensor's first restatement after the backfill, and an idle one, rewrite no day and commit
    # nothing; a batch correcting 3 days restates 3 days of the fact.
    assert figures["sensor_idle_rewritten_partitions"] == figures["idle_rewritten_partitions"] == 0
    assert figures["idle_commits"] == 0
    assert figures["restate3_days_by_table"]["fact_order_item"] == 3, figures["restate3_days_by_table"]
    # A fix to one mart rewrites that mart alone, in one commit; a change of code that alters no row writes nothing.
    assert set(figures["plan_days_changed"]) == {"customer_daily_features"} and figures["promote_commits"] == 1
    assert figures["plan_unchanged_days_changed"] == figures["promote_unchanged_commits"] == 0
    # Its 10 days' orders alone landed, a batch the day after each, then the bench's two correcting batches.
    batches = sorted(p.name for p in (lake / "landing" / "order_items").glob("ingest_date=*"))
    assert batches[0] == "ingest_date=1992-01-02" and batches[-1] <= "ingest_date=1992-01-13", batches
    for _, what, _ in ROWS:
        assert what in report.stdout, what
