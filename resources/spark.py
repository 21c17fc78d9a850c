"""The Spark session: one per process, configured from the environment.

Local mode (`local[2]`) is the embedded default, on the warm engine (resources/engine.py): a local Spark Connect
server each process connects to, started by the first that needs it. `SPARK_ENGINE=in-process` starts a driver in
each process instead, `SPARK_MASTER` points at a cluster, `SPARK_REMOTE` at a Spark Connect server of one's own, and
`SPARK_CONF` (a JSON object) adds or overrides any Spark setting.
"""

import atexit
import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from dagster_pyspark import LazyPySparkResource
from dagster_pyspark.resources import spark_session_from_config
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from resources import conditional_put, engine
from resources.lake import private_files
from resources.settings import Codegen, Settings, SettingsError, settings

LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")


# Built by scripts/setup.sh from resources/java/NioLocalFileSystem.java, next to the Delta jars.
LOCAL_FS_JAR = "exactbackfills-localfs.jar"
LOCAL_FS_CLASS = "exactbackfills.NioLocalFileSystem"
LOCAL_FS_CONTEXT_CLASS = "exactbackfills.NioLocalFileSystem$Context"  # FileContext, used by Delta's commits

# In local mode the driver's JVM does all the work: throughput matters, not pauses, so the parallel garbage collector
# rather than G1.
LOCAL_JAVA_OPTIONS = "-XX:+UseParallelGC"
# For a process that lives for a short run, such as a restatement: the JVM compiles hot code with its quick compiler
# (C1) only. Its optimizing compiler (C2) makes long runs faster, but on the few cores of a local driver its compile
# threads slow every first query of a short run. The larger code cache keeps C1 from filling the default one.
SHORT_RUN_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=512m"


# The Delta jars a session loads, and nothing else of DELTA_JARS_DIR: scripts/setup.sh fetches them and checks their
# SHA-256. Nothing is downloaded when a session starts.
DELTA_JARS = ("delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar")


# For a lake on object storage: Hadoop's S3A and the AWS SDK modules it uses, in DELTA_JARS_DIR/s3a, exactly those the
# pinned list names.
OBJECT_STORE_JARS_LIST = Path(__file__).with_name("java") / "s3a-jars.sha256"
# The project's log stores for Delta's commits, built by scripts/setup.sh: on object storage
# (resources/java/ConditionalPutLogStore.java) and on a local file system (resources/java/HardLinkLogStore.java).
LOG_STORE_JAR = "exactbackfills-logstore.jar"
LOG_STORE_CLASS = "exactbackfills.ConditionalPutLogStore"
LOCAL_LOG_STORE_CLASS = "exactbackfills.HardLinkLogStore"


class MissingJars(RuntimeError):
    """The jars are not where they are expected: set-up was not run (it fetches and checks them)."""


def _object_store_jars() -> list[str]:
    names = [line.split()[1] for line in OBJECT_STORE_JARS_LIST.read_text().splitlines() if line.strip()]
    return [f"s3a/{name}" for name in names]


def application_jars(configured: Settings | None = None) -> str:
    """The jars a Spark application of the project loads, comma-separated as Spark's `jars` setting takes them: the
    Delta jars and the project's log stores, and for a lake on object storage S3A's."""
    configured = configured or settings()
    folder = Path(configured.delta_jars_dir)
    names = [*DELTA_JARS, LOG_STORE_JAR, *(_object_store_jars() if configured.object_store else [])]
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise MissingJars(f"{', '.join(missing)} not in {folder} (DELTA_JARS_DIR): run `source scripts/setup.sh`")
    return ",".join(str(folder / name) for name in names)


# Names the object store's keys the driver was started with (a digest: never the keys), so that a warm engine started
# with other keys is not used.
OBJECT_STORE_KEYS_KEY = "spark.exactbackfills.objectStoreKeys"


def object_store_config(configured: Settings) -> dict[str, str]:
    """For a lake on object storage (LAKE_ROOT=s3a://bucket/prefix, or a local lake compared with one): S3A at
    AWS_ENDPOINT_URL (path-style, as S3-compatible servers expect) in AWS_REGION, its credentials from the standard
    AWS variables of the driver's environment (never a setting, which a command line or a log could show)."""
    if not configured.object_store:
        return {}
    keys = f"{os.environ.get('AWS_ACCESS_KEY_ID', '')}:{os.environ.get('AWS_SECRET_ACCESS_KEY', '')}"
    conf = {
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
        ),
        OBJECT_STORE_KEYS_KEY: hashlib.sha256(keys.encode()).hexdigest()[:16],
    }
    if configured.object_store_endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = configured.object_store_endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
    if configured.object_store_region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = configured.object_store_region
    return conf


def log_store_config(configured: Settings) -> dict[str, str]:
    """Delta's commits through the project's log stores, so that of two drivers committing the same version of a table
    (the warm engine and an in-process command or a notebook) one fails and Delta retries it after checking for a
    conflict, instead of the later silently replacing the earlier: HardLinkLogStore on a local file system, and on
    object storage ConditionalPutLogStore. Delta reads them from the application's settings, not a session's."""
    conf = {"spark.delta.logStore.file.impl": LOCAL_LOG_STORE_CLASS}
    if configured.object_store:
        conf["spark.delta.logStore.s3a.impl"] = LOG_STORE_CLASS
    return conf


def spark_log(configured: Settings) -> Path:
    """Where Spark's and Delta's log lines go (resources/log4j2.properties) instead of the terminal: the warm engine's
    log in its folder, or the local driver's in the lake (on its local disk)."""
    if configured.warm_engine:
        return Path(configured.spark_engine_home) / engine.LOG_FILE
    return configured.local_root / "logs" / "spark.log"


# The driver's option naming its log file (resources/log4j2.properties).
SPARK_LOG_OPTION = "-Dexactbackfills.spark.log="
# What the JVM itself prints on its stderr as it starts, for the vector module that Spark's launcher always adds
# (JavaModuleOptions): no logger prints it, and neither Spark nor Java has an option to leave it out.
INCUBATOR_NOTICE = b"WARNING: Using incubator modules:"


def _logging_options(log: Path, console: bool, config: Path = LOG4J2_PROPERTIES) -> str:
    log.parent.mkdir(parents=True, exist_ok=True)
    return (
        f"-Dlog4j2.configurationFile=file:{config} {SPARK_LOG_OPTION}{log} "
        f"-Dexactbackfills.spark.console={'warn' if console else 'off'}"
    )


def _local_mode_config(configured: Settings, short_runs: bool) -> dict[str, str]:
    java = f"{LOCAL_JAVA_OPTIONS} {SHORT_RUN_JAVA_OPTIONS}" if short_runs else LOCAL_JAVA_OPTIONS
    conf = {
        "spark.driver.extraJavaOptions": f"{java} {_logging_options(spark_log(configured), configured.spark_verbose)}",
    }
    return {**conf, **local_fs_config(configured)}


# In a session's config: connect to the warm engine kept in this folder (resolved when the session is made, so that
# building a config starts nothing: the code location builds its resources when it loads).
ENGINE_HOME_KEY = "exactbackfills.engine.home"


def engine_settings(configured: Settings) -> engine.EngineSettings:
    """What the warm engine is started with: local mode as `SPARK_MASTER` says, with the Delta jars, the project's
    local file system and settings, its log in the engine's folder. A long-lived JVM: the JIT's optimizing compiler
    pays for itself (no SHORT_RUN_JAVA_OPTIONS)."""
    home = Path(configured.spark_engine_home)
    # Its logging configuration is a copy in its folder: the same engine serves any copy of the code.
    logging = _logging_options(spark_log(configured), console=False, config=home / engine.LOG4J_FILE)
    java = f"{LOCAL_JAVA_OPTIONS} {logging}"
    local_fs = local_fs_config(configured)
    jars = application_jars(configured)
    application = {
        **APPLICATION_CONFIG,
        **private_files_config(configured),
        **object_store_config(configured),
        **log_store_config(configured),
        **authenticated_rpc(configured),
        **{k: v for k, v in local_fs.items() if k.startswith("spark.hadoop.")},
        "spark.sql.warehouse.dir": str(home / "spark-warehouse"),
        **_session_config(),
        **configured.extra_spark_conf,
    }
    return engine.EngineSettings(
        master=configured.spark_master,
        driver_memory=configured.spark_driver_memory,
        java_options=java,
        class_path=local_fs.get("spark.driver.extraClassPath", ""),
        jars=jars,
        conf=tuple(sorted(application.items())),
        log4j_properties=LOG4J2_PROPERTIES.read_text(),
    )


# The application's own settings in local mode: Delta's extension and catalog, no UI.
APPLICATION_CONFIG = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    # A warm engine lives for days and serves any lake. Delta keeps each table it has read (its log, its state and the
    # plans over them, 4 MB of heap each) for an hour after its last use, up to 10,000 tables: the tests' hundreds of
    # small lakes kept 1.3 GB of the engine's heap alive, and its collector's pauses stopped every process it served.
    # The 64 tables read last are kept, for 10 minutes: a lake's tables and their side tables, read run after run.
    "spark.databricks.delta.delta.log.cacheSize": "64",
    "spark.databricks.delta.delta.log.cacheRetentionMinutes": "10",
    # With no UI, what Spark's status store keeps of finished jobs, stages, tasks and queries is for nobody.
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "1000",
    "spark.sql.ui.retainedExecutions": "50",
}


def private_files_config(configured: Settings) -> dict[str, str]:
    """What Spark writes through Hadoop (the lake's files and folders) readable by its user alone (FILE_UMASK): Hadoop
    applies a umask of its own, not the process's."""
    return {"spark.hadoop.fs.permissions.umask-mode": configured.file_umask}


def local_fs_config(configured: Settings, executors: bool = False) -> dict[str, str]:
    """The project's local file system, for a lake on this machine's disk, once scripts/setup.sh has built its jar:
    the driver's, and with `executors` (a cluster on this machine) its executors' too."""
    local_fs = Path(configured.delta_jars_dir) / LOCAL_FS_JAR
    if not local_fs.exists():
        return {}
    # Without it, every file and day folder written costs a `chmod` child process, every Delta commit a `readlink`
    # (see the Java source). On the class path, not in spark.jars: spark-submit uses the file system before it loads
    # those.
    return {
        "spark.driver.extraClassPath": str(local_fs),
        **({"spark.executor.extraClassPath": str(local_fs)} if executors else {}),
        "spark.hadoop.fs.file.impl": LOCAL_FS_CLASS,
        "spark.hadoop.fs.AbstractFileSystem.file.impl": LOCAL_FS_CONTEXT_CLASS,
    }


def authenticated_rpc(configured: Settings) -> dict[str, str]:
    """In local mode, the driver's RPC port (on 127.0.0.1, where any user of the machine reaches it) answers only the
    application's own processes: Spark makes the shared secret itself. On another master the secret is the cluster's
    (scripts/spark-cluster.sh)."""
    return {"spark.authenticate": "true"} if configured.spark_master.startswith("local") else {}


def cluster_application_conf() -> dict[str, str]:
    """The Connect server's application settings that are the project's (scripts/spark-cluster.sh): its files private,
    the project's local file system for its driver and executors, which write the lake on this machine's disk, and its
    log stores."""
    configured = settings()
    return {
        **private_files_config(configured),
        **local_fs_config(configured, executors=True),
        **object_store_config(configured),
        **log_store_config(configured),
    }


def retention_defaults(configured: Settings) -> dict[str, str]:
    """Every table this session creates keeps its log and its older versions' files for the rollback horizon (the
    vacuum sets an older table's, exact_backfills/retention.py): under Delta's defaults, a rollback more than 7 days
    back is refused by Delta itself. Session settings, not the warm engine's: a new horizon needs no restart."""
    horizon = f"interval {configured.rollback_horizon_days} days"
    return {
        "spark.databricks.delta.properties.defaults.logRetentionDuration": horizon,
        "spark.databricks.delta.properties.defaults.deletedFileRetentionDuration": horizon,
        # Delta refuses to read a version committed before the file retention, though its files are kept while the
        # commit that replaced it is younger (a table unchanged for two months, rewritten yesterday: yesterday's
        # rollback). retention.refuse_beyond_horizon decides by the replacing commit instead, before any read.
        "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration": "false",
    }


def _session_config() -> dict[str, str]:
    """Session settings: a Spark Connect client sets these on its server session."""
    return {
        # Dates are partition keys: they must not depend on the machine's time zone.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        # Parquet INT64 nanosecond timestamps (what pandas writes) are read as numbers, which landing.py converts:
        # Spark cannot read them as timestamps.
        "spark.sql.legacy.parquet.nanosAsLong": "true",
        # Delta's default of 50 tasks to replay a table's log is built for clusters.
        "spark.databricks.delta.snapshotPartitions": "2",
        # A table-day is a file of its own, read through its day's partition or joined on its key whole: per-column
        # minimum and maximum statistics skip nothing for these reads, yet every write computes them and every
        # replay of a table's log parses them (a sixth of the engine's CPU to commit one day at SF1). The tables
        # this session creates record each file's row count alone.
        "spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols": "0",
        # List folders on the driver, which sees the lake's file system: above 32 folders Spark lists them with a job
        # of one task per folder, and the landing has a folder per batch. Over Connect the server lists again for every
        # request that analyzes a read of the landing (its files, caching it, dropping its cache).
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    }


# Expressions evaluated interpreted (Spark's internal factory mode, which its own tests use). Spark compiles Java code
# for the stages and expressions of each query: for a few days' rows, a large share of the work.
INTERPRETED_CONFIG = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}

# Under SPARK_CODEGEN=auto, a write reading at most this much is evaluated interpreted: below it, compiling its
# queries costs more than evaluating its rows without (docs/performance.md says where it was measured).
INTERPRETED_UP_TO_BYTES = 2**20


def evaluation_for(read_bytes: int) -> Codegen:
    """How a write reading `read_bytes` of files is evaluated under SPARK_CODEGEN=auto."""
    return Codegen.INTERPRETED if read_bytes <= INTERPRETED_UP_TO_BYTES else Codegen.COMPILED


@contextmanager
def interpreted(spark: SparkSession) -> Iterator[None]:
    """The session's queries evaluated interpreted inside, as before after (the settings are the session's own: a warm
    engine's other clients keep theirs)."""
    before = {key: spark.conf.get(key) for key in INTERPRETED_CONFIG}
    for key, value in INTERPRETED_CONFIG.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, was in before.items():
            if was is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, was)


def spark_config(
    configured: Settings | None = None, short_runs: bool = False, with_secrets: bool = True
) -> dict[str, str]:
    """The session's settings from the project's (`configured`, the environment's when not given). Without
    `with_secrets`, what a Dagster resource may show: SPARK_CONF left out (it may hold an object store's keys) and the
    Connect URL without a token; the session adds them when it starts (`spark_session`)."""
    configured = configured or settings()
    conf = {**_session_config(), **retention_defaults(configured)}
    if configured.warm_engine:
        _quiet_connect_client(configured)
        conf[ENGINE_HOME_KEY] = configured.spark_engine_home
    elif configured.spark_remote:
        _quiet_connect_client(configured)
        # The application's own settings (Delta's extension and catalog, the UI) are the Connect server's
        # (scripts/spark-cluster.sh): a client cannot change them.
        conf["spark.remote"] = remote_url(configured) if with_secrets else without_token(configured.spark_remote)
    else:
        conf.update(
            {
                "spark.app.name": "exact-backfills",
                **APPLICATION_CONFIG,
                "spark.sql.warehouse.dir": str(configured.local_root / "spark-warehouse"),
                "spark.master": configured.spark_master,
                "spark.driver.memory": configured.spark_driver_memory,
            }
        )
        if configured.spark_master.startswith("local"):
            conf.update(_local_mode_config(configured, short_runs or configured.spark_short_runs))
        conf.update(private_files_config(configured))
        conf.update(object_store_config(configured))
        conf.update(log_store_config(configured))
        conf.update(authenticated_rpc(configured))
        conf["spark.jars"] = application_jars(configured)
    if configured.codegen is Codegen.INTERPRETED:
        conf.update(INTERPRETED_CONFIG)
    if with_secrets:
        conf.update(configured.extra_spark_conf)
    return conf


def without_token(url: str) -> str:
    """A Spark Connect URL without its token: what may be shown."""
    base, *parameters = url.split(";")
    kept = [p for p in parameters if not p.startswith(engine.TOKEN_PARAMETERS)]
    return ";".join([base, *kept]) if kept else base.rstrip("/")


def remote_url(configured: Settings) -> str:
    """SPARK_REMOTE with the token of SPARK_CONNECT_TOKEN_FILE, which a Connect server started by
    scripts/spark-cluster.sh asks for (engine.token_parameter). The token leaves this machine only over the server's
    TLS (`;use_ssl=true`): to a server on another host without it, a SettingsError."""
    url = configured.spark_remote
    if not configured.spark_connect_token_file or any(f";{p}" in url for p in engine.TOKEN_PARAMETERS):
        return url
    try:
        secret = Path(configured.spark_connect_token_file).read_text().strip()
    except OSError as unreadable:
        raise SettingsError(
            f"SPARK_CONNECT_TOKEN_FILE={configured.spark_connect_token_file}: {unreadable.strerror}; the Connect "
            "server's script writes it when it starts (bash scripts/spark-cluster.sh status)"
        ) from None
    base, *parameters = url.split(";")
    host = urlparse(base.replace("sc://", "http://", 1)).hostname or ""
    if host not in ("localhost", "127.0.0.1", "::1") and "use_ssl=true" not in parameters:
        raise SettingsError(
            f"SPARK_REMOTE={without_token(url)} is on another host without TLS: its token would cross the network in "
            "the clear; add ;use_ssl=true (the server's TLS)"
        )
    base = base.replace("//127.0.0.1:", f"//{engine.CLIENT_HOST}:", 1).rstrip("/")
    return ";".join([f"{base}/", *parameters, engine.token_parameter(secret)])


def _quiet_connect_client(configured: Settings) -> None:
    # The Connect client logs, as JSON on the terminal, every error the server returns, expected ones included (a
    # probe for a table not written yet); each still reaches its caller as an exception. SPARK_VERBOSE keeps them.
    from pyspark.sql.connect.logging import configureLogging

    configureLogging("ERROR" if configured.spark_verbose else "CRITICAL")


def _driver_log(conf: dict[str, str]) -> Path | None:
    """The log file of a driver started with `conf`, when it logs to one (local mode)."""
    for option in conf.get("spark.driver.extraJavaOptions", "").split():
        if option.startswith(SPARK_LOG_OPTION):
            return Path(option[len(SPARK_LOG_OPTION) :])
    return None


def _pass_on_stderr(pipe: int, log: Path) -> None:
    """Copy the driver JVM's stderr to this process's, except the JVM's incubator notice, which goes to its log."""
    with open(pipe, "rb") as jvm_stderr:
        for line in jvm_stderr:
            if line.startswith(INCUBATOR_NOTICE):
                with log.open("ab") as f:
                    f.write(line)
                continue
            while line:
                line = line[os.write(2, line) :]


# Settings a driver JVM reads when it starts, before any context exists.
LAUNCH_SETTINGS = ("spark.driver.", "spark.jars", "spark.submit.")


def _start_local_driver(conf: dict[str, str]) -> None:
    """Start the driver JVM for a session with `conf`, as the session's builder would, but with its stderr passed on
    through _pass_on_stderr when it logs to a file (local mode), and SPARK_CONF's settings off its command line. Only
    for a classic session, and only when this process has no JVM yet."""
    if "spark.remote" in conf or ENGINE_HOME_KEY in conf:
        return
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    log = _driver_log(conf)
    spark_conf = SparkConf().setAll(list(conf.items()))
    # The JVM's command line (every user's `ps`) gets the settings it must start with, and none of SPARK_CONF's other
    # ones (they may hold an object store's keys): the context takes those over the gateway.
    extra = settings().extra_spark_conf
    launch = SparkConf().setAll([(k, v) for k, v in conf.items() if k not in extra or k.startswith(LAUNCH_SETTINGS)])
    if log is None:
        SparkContext(conf=spark_conf, gateway=launch_gateway(launch))
        return
    read, write = os.pipe()
    copier = threading.Thread(target=_pass_on_stderr, args=(read, log), name="spark-driver-stderr", daemon=True)
    copier.start()
    try:
        gateway = launch_gateway(launch, popen_kwargs={"stderr": write})
    except BaseException:
        os.close(write)
        copier.join(timeout=5)  # what the JVM said before it exited reaches the terminal before the error
        raise
    os.close(write)  # the JVM holds its own copy
    SparkContext(conf=spark_conf, gateway=gateway)


def spark_session(conf: dict[str, str]) -> SparkSession:
    """The process's session for `conf`: created on first use, then shared (getOrCreate). On the warm engine, started
    first if it is not up. What the process writes from then on (the lake's own files: landing, control notes) is
    its user's alone. For a lake on object storage, refused (a StorageError) if its server does not honour
    conditional PUTs (resources/conditional_put.py)."""
    private_files()
    conditional_put.ensure_honoured(settings().lake_root)  # before any driver commits there
    if ENGINE_HOME_KEY in conf:
        home = Path(conf[ENGINE_HOME_KEY])
        warm = engine.ensure(home, engine_settings(settings()))
        conf = {
            **{k: v for k, v in conf.items() if k != ENGINE_HOME_KEY},
            "spark.remote": engine.client_url(home, warm),
        }
    elif "spark.remote" not in conf:
        _forget_inherited_connect_mode()
    _start_local_driver(conf)
    session = spark_session_from_config(conf)
    if "spark.remote" in conf:
        _release_at_exit(session)
    return session


_released: set[int] = set()


def _release_at_exit(session: SparkSession) -> None:
    """Release a Connect session when the process exits, before Python's last garbage collection. A DataFrame cached
    on the server and still referenced then (a failed run's checkpoints) asks the server to drop it from its
    finalizer; with a `token` parameter in the URL (engine.token_parameter) that call starts a thread, which an
    interpreter that is finalizing never runs: the process would hang at its exit. Released first, the session's
    finalizers do nothing, and the server drops what the session cached."""
    if id(session) in _released:
        return
    _released.add(id(session))

    def release() -> None:
        try:
            session.stop()
        except Exception:  # noqa: BLE001  the server may be gone already; the process is ending either way
            pass

    atexit.register(release)


# What PySpark sets in its process's environment once it has a Spark Connect session, so that every later session and
# column of the process is a Connect one. A process started by such a process inherits it: one that is to start a
# driver of its own (SPARK_ENGINE=in-process, started by a process on the warm engine) drops it first.
_CONNECT_MODE_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")


def _forget_inherited_connect_mode() -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    if ConnectSession._get_default_session() is None and SparkContext._active_spark_context is None:
        for variable in _CONNECT_MODE_VARIABLES:
            os.environ.pop(variable, None)


def get_spark(short_runs: bool = False) -> SparkSession:
    """The process's session, configured from the environment (with `short_runs`, for a process that lives for a
    short run: see SHORT_RUN_JAVA_OPTIONS)."""
    return spark_session(spark_config(short_runs=short_runs))


def session_of(resource: LazyPySparkResource) -> SparkSession:
    """A run's session, from its Dagster resource's settings and the secrets the resource does not show (SPARK_CONF, a
    Connect token), read from the environment now: on the warm engine or a Connect server, or the driver started as
    get_spark() starts it, then the resource's own (lazy) session, which reuses it."""
    configured = settings()
    conf = {**resource.spark_config, **configured.extra_spark_conf}
    if "spark.remote" in conf:
        conf["spark.remote"] = remote_url(configured)
    if ENGINE_HOME_KEY in conf or "spark.remote" in conf:
        return spark_session(conf)
    conditional_put.ensure_honoured(configured.lake_root)
    _start_local_driver(conf)
    return resource.spark_session


def spark_resource(configured: Settings, short_runs: bool = False) -> LazyPySparkResource:
    """Dagster resource, from the project's settings but those that may hold a secret (which its step's session adds:
    `session_of`), so that the UI's resources page shows none; lazy so a run whose steps never touch Spark starts no
    JVM. `short_runs`: for a job whose runs last seconds to a minute (SHORT_RUN_JAVA_OPTIONS)."""
    return LazyPySparkResource(spark_config=spark_config(configured, short_runs, with_secrets=False))
