"""Peer benchmark, partial: dbt-core + dbt-spark (`method: session`) with incremental_strategy microbatch, daily
batches, Delta, data tests (unique and not-null keys, reconciliation with the upstream per day).

    python bench/peers/dbt_peer.py --lake LAKE_ROOT --start 1992-01-01 --end 1992-03-31 --out result.json

Run it with .venv-peers-dbt/bin/python (`bash bench/peers/setup.sh dbt`). dbt-spark runs SQL models only (its Python
models need Databricks), so the project's transforms are rewritten in SQL here, and only downstream of staging: the
landing contract, staging's latest-version pick and quarantine (landing.py, quarantine.py) are not reproduced. The
models read the project's own staging and product tables as written by bench/run.py's bare job
(LAKE_ROOT/bare/stg_order_items, dim_product) and build fact_order_item and the three marts. `peer_dbt_spark_s` is the
`dbt build` process (every model's daily batches, then its tests), launch to exit; its row counts are compared with the
bare job's.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import date, timedelta
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARTS = {  # SQL of the project's transforms.py, over the fact of the batch
    "daily_revenue": """select order_date, channel, count(1) as item_count,
  cast(size(collect_set(order_id)) as bigint) as order_count,
  cast(sum(gross_amount) as decimal(18,2)) as gross_amount,
  cast(sum(discount_amount) as decimal(18,2)) as discount_amount,
  cast(sum(net_amount) as decimal(18,2)) as net_amount, cast(sum(cost_amount) as decimal(18,2)) as cost_amount
from {{ ref('fact_order_item') }} group by order_date, channel""",
    "daily_category_revenue": """select order_date, product_category, count(1) as item_count,
  cast(size(collect_set(order_id)) as bigint) as order_count,
  cast(sum(gross_amount) as decimal(18,2)) as gross_amount, cast(sum(net_amount) as decimal(18,2)) as net_amount
from {{ ref('fact_order_item') }} group by order_date, product_category""",
    "customer_daily_features": """select customer_id, order_date,
  cast(size(collect_set(order_id)) as bigint) as order_count,
  count(1) as item_count, cast(sum(quantity) as bigint) as total_quantity,
  cast(size(collect_set(product_id)) as bigint) as distinct_products,
  cast(sum(gross_amount) as decimal(18,2)) as gross_amount, cast(sum(net_amount) as decimal(18,2)) as net_amount,
  cast(case when sum(gross_amount) > 0 then round(sum(discount_amount) / sum(gross_amount), 4) end as decimal(9,4))
    as discount_rate,
  sum(case when product_status = 'PASSIVE' then 1 else 0 end) as passive_product_items
from {{ ref('fact_order_item') }} group by customer_id, order_date""",
}
FACT = """select xxhash64(s.order_id, s.order_item_id) as order_item_sk, s.order_id, s.order_item_id, s.order_date,
  s.customer_id, s.product_id, s.channel, s.quantity, s.gross_amount, s.discount_amount,
  cast(s.gross_amount - s.discount_amount as decimal(18,2)) as net_amount, s.cost_amount,
  p.category as product_category, p.status as product_status
from {{ source('bare', 'stg_order_items') }} s
left join (  -- every product version, valid until the next one takes effect: the product as of the order day
  select *, date_sub(lead(valid_from) over (partition by product_id order by valid_from), 1) as valid_to
  from {{ source('bare', 'dim_product') }}
) p on s.product_id = p.product_id and s.order_date >= p.valid_from
  and (p.valid_to is null or s.order_date <= p.valid_to)"""
KEYS = {
    "fact_order_item": ["order_id", "order_item_id"],
    "daily_revenue": ["order_date", "channel"],
    "daily_category_revenue": ["order_date", "product_category"],
    "customer_daily_features": ["customer_id", "order_date"],
}
UNIQUE_TEST = """{% test unique_key(model, columns) %}
select {{ columns | join(', ') }} from {{ model }} group by {{ columns | join(', ') }} having count(1) > 1
{% endtest %}"""
# Per day, the table's item count and net amount equal its upstream's (the project's reconciles_with_upstream).
RECONCILE_TEST = """{% test reconciles_by_day(model, upstream, here, there) %}
with a as (select order_date, {{ here }} as m from {{ model }} group by order_date),
b as (select order_date, {{ there }} as m from {{ upstream }} group by order_date)
select * from a full outer join b on a.order_date = b.order_date where not (a.m <=> b.m)
{% endtest %}"""


def spark_conf(lake: Path, peer: Path) -> dict[str, str]:
    """The project's local Spark settings (resources/spark.py spark_config()), with a metastore of the peer's own."""
    jars = sorted(str(p) for p in (REPO / ".jars").glob("delta-*.jar"))
    return {
        "spark.master": "local[2]",
        "spark.driver.memory": "4g",
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.ui.enabled": "false",
        "spark.driver.extraJavaOptions": f"-XX:+UseParallelGC -Dderby.system.home={peer}",
        "spark.sql.warehouse.dir": str(peer / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={peer / 'metastore_db'};create=true",
    }


def write_project(lake: Path, peer: Path, start: str) -> None:
    (peer / "models").mkdir(parents=True)
    (peer / "tests" / "generic").mkdir(parents=True)
    (peer / "dbt_project.yml").write_text(
        "name: dbt_peer\nversion: '1.0.0'\nprofile: dbt_peer\nconfig-version: 2\n"
        "models:\n  dbt_peer:\n    +materialized: incremental\n    +incremental_strategy: microbatch\n"
        f"    +event_time: order_date\n    +begin: '{start}'\n    +batch_size: day\n    +file_format: delta\n"
        "    +partition_by: [order_date]\n"
    )
    conf = "".join(f'        {k}: "{v}"\n' for k, v in spark_conf(lake, peer).items())
    (peer / "profiles.yml").write_text(
        "dbt_peer:\n  target: local\n  outputs:\n    local:\n      type: spark\n      method: session\n"
        f"      host: NA\n      schema: dbt_peer\n      threads: 1\n      server_side_parameters:\n{conf}"
    )
    (peer / "models" / "fact_order_item.sql").write_text(FACT)
    for mart, sql in MARTS.items():
        (peer / "models" / f"{mart}.sql").write_text(sql)
    (peer / "tests" / "generic" / "unique_key.sql").write_text(UNIQUE_TEST)
    (peer / "tests" / "generic" / "reconciles_by_day.sql").write_text(RECONCILE_TEST)
    marts = {
        m: [("cast(sum(item_count) as bigint)", "count(1)"), ("sum(net_amount)", "sum(net_amount)")] for m in MARTS
    }
    models = []
    for table, key in KEYS.items():
        tests: list[dict] = [{"unique_key": {"columns": key}}]
        if table in marts:
            here = "struct(" + ", ".join(h for h, _ in marts[table]) + ")"
            there = "struct(" + ", ".join(u for _, u in marts[table]) + ")"
            tests.append({"reconciles_by_day": {"upstream": "ref('fact_order_item')", "here": here, "there": there}})
        columns = [{"name": c, "data_tests": ["not_null"]} for c in key]
        models.append({"name": table, "data_tests": tests, "columns": columns})
    stg = {
        "name": "bare",
        "schema": "bare",
        "tables": [
            {"name": "stg_order_items", "config": {"event_time": "order_date"}},
            {"name": "dim_product"},  # every version: the fact joins the product as of its day
        ],
    }
    (peer / "models" / "schema.yml").write_text(json.dumps({"version": 2, "models": models, "sources": [stg]}))
    # The project's staging and products, as the bare job wrote them, registered in the peer's metastore.
    hooks = [
        "create schema if not exists bare",
        *[
            f"create table if not exists bare.{t} using delta location '{lake / 'bare' / t}'"
            for t in ("stg_order_items", "dim_product")
        ],
    ]
    with (peer / "dbt_project.yml").open("a") as f:
        f.write("on-run-start:\n" + "".join(f'  - "{h}"\n' for h in hooks))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", required=True)
    parser.add_argument("--start", required=True)
    parser.add_argument("--end", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    lake = Path(args.lake).resolve()
    if not (lake / "bare" / "stg_order_items" / "_delta_log").exists():
        raise SystemExit("needs bench/run.py's bare job's tables in LAKE_ROOT/bare (it reads staging from there)")
    peer = lake / "peer_dbt"
    shutil.rmtree(peer, ignore_errors=True)
    write_project(lake, peer, args.start)
    dbt = str(Path(sys.executable).parent / "dbt")
    # dbt's backfill of a microbatch model: every day batch of the range (event time end is exclusive).
    end_exclusive = (date.fromisoformat(args.end) + timedelta(days=1)).isoformat()
    command = [dbt, "build", "--project-dir", str(peer), "--profiles-dir", str(peer)]
    command += ["--event-time-start", args.start, "--event-time-end", end_exclusive]
    t0 = time.monotonic()
    done = subprocess.run(command, cwd=peer, capture_output=True, text=True, env={**os.environ})
    seconds = time.monotonic() - t0
    (peer / "build.log").write_text(done.stdout + done.stderr)
    summary = re.findall(r"Done\. PASS=\d+ WARN=\d+ ERROR=\d+ SKIP=\d+.*", done.stdout)
    result = {
        "peer_dbt_spark_s": round(seconds, 1),
        "command": " ".join(command),
        "returncode": done.returncode,
        "summary": summary[-1] if summary else done.stdout[-3000:],
        "scope": "fact_order_item and the marts, from the bare job's stg_order_items and dim_product (SQL rewrite)",
        "versions": {p: version(p) for p in ("dbt-core", "dbt-spark", "pyspark")},
    }
    if done.returncode == 0:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder
        for key, value in spark_conf(lake, peer).items():
            builder = builder.config(key, value)
        spark = builder.enableHiveSupport().getOrCreate()
        rows, equal = {}, {}
        for table in KEYS:
            rows[table] = spark.table(f"dbt_peer.{table}").count()
            equal[table] = rows[table] == spark.read.format("delta").load(str(lake / "bare" / table)).count()
        result.update(rows_by_table=rows, counts_equal_bare=equal, equal_to_bare=all(equal.values()))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
