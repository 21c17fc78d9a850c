"""The SQLMesh peer's project config: the Spark engine with the project's own Spark settings (resources/spark.py
`spark_config()`: Delta's extension and catalog and jars, local[2], driver memory, shuffle partitions), a Hive
metastore and warehouse of its own under PEER_DIR, and SQLMesh's state in DuckDB (SQLMesh advises against keeping
state in Spark)."""

import os
from pathlib import Path

from sqlmesh.core.config import Config, GatewayConfig, ModelDefaultsConfig
from sqlmesh.core.config.connection import DuckDBConnectionConfig, SparkConnectionConfig

from resources.spark import spark_config

PEER_DIR = Path(os.environ["PEER_DIR"])
_project = spark_config()
_spark = {
    **_project,
    "spark.app.name": "sqlmesh-peer",
    "spark.sql.warehouse.dir": str(PEER_DIR / "warehouse"),
    "spark.sql.catalogImplementation": "hive",
    "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={PEER_DIR / 'metastore_db'};create=true",
    # Derby's own log next to its database, not in the working directory.
    "spark.driver.extraJavaOptions": f"{_project.get('spark.driver.extraJavaOptions', '')} "
    f"-Dderby.system.home={PEER_DIR}",
}

config = Config(
    gateways={
        "spark": GatewayConfig(
            # One task at a time: a 2-core local driver, and the project also runs one build at a time.
            connection=SparkConnectionConfig(config=_spark, concurrent_tasks=1),
            state_connection=DuckDBConnectionConfig(database=str(PEER_DIR / "state.duckdb")),
        )
    },
    default_gateway="spark",
    model_defaults=ModelDefaultsConfig(dialect="spark"),
    cache_dir=str(PEER_DIR / "cache"),
)
