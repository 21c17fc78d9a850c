"""The embedded profile's warm engine: one Spark Connect server on this machine, in local mode with the Delta jars and
the project's settings, started by the first process that needs Spark and left running. Every later process (a run
Dagster launches, a command) connects to a JVM that is already started and compiled, instead of starting one of its
own: a JVM, Delta's classes and their first queries cost a short run most of its time.

Its state is in a folder of its own (SPARK_ENGINE_HOME, `.engine/` in the repository): the server's pid, port and
settings, and its log (`spark.log`). It is started under a lock, so processes that need it at once share one. It runs
until `python -m assets_pkg engine stop`; a process whose settings differ from the running engine's (its memory, its
master, SPARK_CONF) is refused, naming both, rather than given an engine that is not what it asked for.
`SPARK_ENGINE=in-process` starts a driver in each process instead, as Spark's local mode does."""

import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

HOST = "127.0.0.1"
STATE_FILE = "engine.json"
LOG_FILE = "spark.log"  # its Spark and Delta log lines (resources/log4j2.properties)
OUT_FILE = "engine.out"  # what the server process itself prints, before its logging starts among it
LOG4J_FILE = "log4j2.properties"
START_TIMEOUT_S = 180


class EngineError(RuntimeError):
    pass


@dataclass(frozen=True)
class EngineSettings:
    """What the server is started with: a process asking for other settings cannot use it."""

    master: str
    driver_memory: str
    java_options: str
    class_path: str
    jars: str
    conf: tuple[tuple[str, str], ...]  # the application's settings, Delta's extension and catalog among them
    log4j_properties: str  # its logging configuration, written into its folder (LOG4J_FILE) for `java_options`

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Running:
    pid: int
    port: int
    digest: str
    settings: dict

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # this process started it, and it has ended
            return False
    except ChildProcessError:  # not this process's child
        pass
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def running(home: Path) -> Running | None:
    """The engine of `home` if it is up: its process alive and its port answering."""
    state = home / STATE_FILE
    if not state.exists():
        return None
    found = Running(**json.loads(state.read_text()))
    return found if _alive(found.pid) and _answers(found.port) else None


@contextmanager
def _locked(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


# Starts a process with SIGINT and SIGTERM at their defaults, so that `stop` can end it. Dagster's execution maps
# SIGTERM to SIGINT's handler (dagster._utils.interrupts): in a process started with SIGINT ignored (nohup, a background
# job), a run leaves SIGTERM ignored too, and every process it starts afterwards inherits that; a Dagster process
# started so (`dagster dev`) maps its own SIGTERM likewise unless SIGINT is back at its default.
STOPPABLE = ["env", "--default-signal=INT,TERM"]


def _command(wanted: EngineSettings, port: int) -> list[str]:
    spark_home = _spark_home()
    connect_jar = next(Path(spark_home, "jars").glob("spark-connect_*.jar"))
    conf = [
        *wanted.conf,
        ("spark.connect.grpc.binding.address", HOST),
        ("spark.connect.grpc.binding.port", str(port)),
        ("spark.driver.bindAddress", HOST),
        ("spark.driver.host", HOST),
    ]
    return [
        *STOPPABLE,
        str(Path(spark_home, "bin", "spark-submit")),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--name",
        "exact-backfills-engine",
        "--master",
        wanted.master,
        "--driver-memory",
        wanted.driver_memory,
        "--driver-java-options",
        wanted.java_options,
        *(["--driver-class-path", wanted.class_path] if wanted.class_path else []),
        *(["--jars", wanted.jars] if wanted.jars else []),
        *[arg for key, value in conf for arg in ("--conf", f"{key}={value}")],
        str(connect_jar),
    ]


def _start(home: Path, wanted: EngineSettings) -> Running:
    (home / LOG4J_FILE).write_text(wanted.log4j_properties)
    port = _free_port()
    log = home / OUT_FILE
    with open(log, "ab") as out:
        process = subprocess.Popen(
            _command(wanted, port),
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a process group of its own: it outlives this process, and stop takes it whole
            cwd=home,
            env={**os.environ, "SPARK_LOCAL_IP": HOST},
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop_group(process.pid)
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise EngineError(
                f"the warm Spark engine did not start ({'it exited' if process.poll() is not None else 'no answer'} "
                f"after {START_TIMEOUT_S} s at most); {log} ends with:\n" + "\n".join(tail)
            )
        time.sleep(0.2)
    started = Running(process.pid, port, wanted.digest, asdict(wanted))
    (home / STATE_FILE).write_text(json.dumps(asdict(started), indent=2))
    return started


def _shown(value: object) -> str:
    """A setting in a message: itself, or for a long one (a file's text) its digest."""
    text = repr(value)
    return text if len(text) <= 200 else f"text of SHA-256 {hashlib.sha256(text.encode()).hexdigest()[:12]}"


def ensure(home: Path, wanted: EngineSettings) -> Running:
    """The engine of `home`, started now if it is not up; refused if it runs with other settings."""
    with _locked(home):
        found = running(home)
        if found is None:
            return _start(home, wanted)
        if found.digest != wanted.digest:
            asked = json.loads(json.dumps(asdict(wanted)))  # as the running engine's were stored
            differ = {k: (found.settings.get(k), v) for k, v in asked.items() if found.settings.get(k) != v}
            details = "; ".join(
                f"{k}: it runs with {_shown(was)}, this process asks for {_shown(now)}"
                for k, (was, now) in differ.items()
            )
            raise EngineError(
                f"the warm Spark engine in {home} runs with other settings ({details}): stop it with "
                "`python -m assets_pkg engine stop` (its runs end with it), or set SPARK_ENGINE=in-process"
            )
        return found


def _stop_group(pid: int) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 5)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)


def stop(home: Path) -> Running | None:
    """Stop the engine of `home` (and everything it runs): the engine it was, if one was up."""
    with _locked(home):
        state = home / STATE_FILE
        if not state.exists():
            return None
        found = Running(**json.loads(state.read_text()))
        if _alive(found.pid):
            _stop_group(found.pid)
        state.unlink()
        return found
