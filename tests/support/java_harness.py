"""The tests' small Java programs (tests/support/*.java): compiled once, each run in a JVM of its own against the jars
the project's Spark applications load, calling a log store as Delta calls it, without a Spark session."""

import shutil
import subprocess
from pathlib import Path

import pyspark

from resources.settings import settings
from resources.spark import DELTA_JARS, LOCAL_FS_JAR, LOG_STORE_JAR

SOURCES = Path(__file__).parent
# A JVM for a few calls: small, and its quick compiler only.
JAVA_OPTIONS = ["-Xmx128m", "-XX:TieredStopAtLevel=1"]


def class_path(object_store: bool = False) -> str:
    """pyspark's jars (Hadoop among them), Delta's storage jar and the project's log stores and local file system;
    with `object_store`, S3A's and the AWS SDK's."""
    jars = Path(settings().delta_jars_dir)
    ours = [jars / DELTA_JARS[1], jars / LOG_STORE_JAR, jars / LOCAL_FS_JAR]
    s3a = [str(jars / "s3a" / "*")] if object_store else []
    return ":".join([str(Path(pyspark.__file__).parent / "jars" / "*"), *map(str, ours), *s3a])


def compiled(name: str, into: Path) -> Path:
    """tests/support/<name>.java compiled into the folder `into`."""
    subprocess.run(
        ["javac", "-nowarn", "--release", "17", "-cp", class_path(), "-d", str(into), str(SOURCES / f"{name}.java")],
        check=True,
    )
    return into


def command(classes: Path, name: str, *args: str, object_store: bool = False) -> list[str]:
    """The command running program `name` (compiled into `classes`) with `args`."""
    java = shutil.which("java") or "java"
    return [java, *JAVA_OPTIONS, "-cp", f"{classes}:{class_path(object_store)}", name, *args]


def hadoop_settings(spark_conf: dict[str, str]) -> list[str]:
    """The `spark.hadoop.*` settings of a Spark configuration as Hadoop's own KEY=VALUE."""
    return [f"{k.removeprefix('spark.hadoop.')}={v}" for k, v in spark_conf.items() if k.startswith("spark.hadoop.")]
