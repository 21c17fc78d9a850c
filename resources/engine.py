"""The embedded profile's warm engine: one Spark Connect server on this machine, in local mode with the Delta jars and
the project's settings, started by the first process that needs Spark and left running. Every later process (a run
Dagster launches, a command) connects to a JVM that is already started and compiled, instead of starting one of its
own: a JVM, Delta's classes and their first queries cost a short run most of its time.

Its state is in a folder of its own (SPARK_ENGINE_HOME, `.engine/` in the repository), readable by its user alone: the
server's pid, port and a digest of its settings, its log (`spark.log`), and the token a client must present. It is
started under a lock, so processes that need it at once share one. It runs until `python -m exact_backfills engine
stop`; a process whose settings differ from the running engine's (its memory, its master, SPARK_CONF) is refused,
naming which, rather than given an engine that is not what it asked for. `SPARK_ENGINE=in-process` starts a driver in
each process instead, as Spark's local mode does.

Nothing another user of the machine can reach: the server listens on 127.0.0.1 and runs nothing for a client without
its token (Spark Connect's pre-shared token, given to the server in its environment, never on a command line); it
binds a port the system chooses, which it then names in its log, so no other process can take the port between its
choice and the bind; its settings (SPARK_CONF may hold an object store's keys) are in a properties file of its own,
not on its command line."""

import fcntl
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

HOST = "127.0.0.1"
# A client presenting the token connects to "localhost": gRPC's local credentials, for a connection that does not leave
# the machine, carry the token without TLS.
CLIENT_HOST = "localhost"
STATE_FILE = "engine.json"
TOKEN_FILE = "token"  # the token every client presents (0600)
CONF_FILE = "engine.conf"  # the application's settings, as spark-submit's properties file (0600)
# The line the server logs once it listens (logged by SparkConnectServer at INFO, which its log configuration keeps).
_STARTED = re.compile(r"Spark Connect server started at: \S*?:(\d+)")
TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
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
    settings: dict  # as `recorded` stores them: a digest of each application setting's value, not the value

    @property
    def url(self) -> str:
        """Where it listens, as a message shows it: without its token."""
        return f"sc://{HOST}:{self.port}"


def recorded(wanted: EngineSettings) -> dict:
    """The settings as the state file keeps them: every application setting's value as a digest (SPARK_CONF may hold
    a secret), so that a difference can be named without showing either value."""
    kept = asdict(wanted)
    kept["conf"] = [[k, "sha256:" + hashlib.sha256(v.encode()).hexdigest()[:12]] for k, v in wanted.conf]
    return kept


def token(home: Path) -> str:
    """The running engine's token, from its folder: only its user can read it."""
    return (home / TOKEN_FILE).read_text().strip()


def client_url(home: Path, found: Running) -> str:
    """The URL a client connects with: the engine's port and token (never shown)."""
    return f"sc://{CLIENT_HOST}:{found.port}/;{token_parameter(token(home))}"


# The parameters of a Connect URL that carry a token.
TOKEN_PARAMETERS = ("token=", "authorization=")


def token_parameter(secret: str) -> str:
    """A Connect server's token as a parameter of the URL a client connects with: the request header the server checks
    (`authorization: Bearer ...`), which PySpark sends with every request, rather than PySpark's own `token`
    parameter. PySpark turns `token` into gRPC call credentials, whose plugin gRPC runs on a new Python thread for every
    request; a garbage collection in that thread can finalize a checkpointed DataFrame, whose finalizer
    (CachedRemoteRelation.__del__) sends a request of its own, which waits on the channel lock the first request holds
    while that one waits for the thread to start: the process hangs. A header starts no thread
    (tests/test_security.py fails if a request starts one)."""
    return f"authorization=Bearer {secret}"


def write_private(path: Path, text: str) -> None:
    """Write a file only its user can read, replacing it whole (never through a link planted at its name)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(partial, path)


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
    home.chmod(0o700)  # its token and its log: its user's alone
    with open(home / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


# Starts a process with SIGINT and SIGTERM at their defaults, so that `stop` can end it. Dagster's execution maps
# SIGTERM to SIGINT's handler (dagster._utils.interrupts): in a process started with SIGINT ignored (nohup, a background
# job), a run leaves SIGTERM ignored too, and every process it starts afterwards inherits that; a Dagster process
# started so (`dagster dev`) maps its own SIGTERM likewise unless SIGINT is back at its default.
STOPPABLE = ["env", "--default-signal=INT,TERM"]


def _properties(wanted: EngineSettings) -> str:
    """The application's settings as a properties file: on the server's command line they would be on every user's
    `ps`. Port 0: the system chooses a free one, bound at once."""
    conf = [
        *wanted.conf,
        ("spark.connect.grpc.binding.address", HOST),
        ("spark.connect.grpc.binding.port", "0"),
        ("spark.driver.bindAddress", HOST),
        ("spark.driver.host", HOST),
    ]
    escape = str.maketrans({"\\": "\\\\", "\n": "\\n", "=": "\\=", ":": "\\:"})
    return "".join(f"{k.translate(escape)}={v.translate(escape)}\n" for k, v in conf)


def _command(wanted: EngineSettings, home: Path) -> list[str]:
    spark_home = _spark_home()
    connect_jar = next(Path(spark_home, "jars").glob("spark-connect_*.jar"))
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
        "--properties-file",
        str(home / CONF_FILE),
        str(connect_jar),
    ]


def _bound_port(log: Path, since: int) -> int | None:
    """The port the server says it listens on, in what its log gained since offset `since`."""
    if not log.exists():
        return None
    with open(log, "rb") as f:
        f.seek(since)
        found = _STARTED.search(f.read().decode(errors="replace"))
    return int(found.group(1)) if found else None


def _start(home: Path, wanted: EngineSettings) -> Running:
    write_private(home / LOG4J_FILE, wanted.log4j_properties + _STARTED_LOGGED)
    write_private(home / CONF_FILE, _properties(wanted))
    secret = secrets.token_urlsafe(32)
    write_private(home / TOKEN_FILE, secret + "\n")
    log, spark_log = home / OUT_FILE, home / LOG_FILE
    logged = spark_log.stat().st_size if spark_log.exists() else 0
    with open(log, "ab") as out:
        process = subprocess.Popen(
            _command(wanted, home),
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a process group of its own: it outlives this process, and stop takes it whole
            umask=0o077,  # what the JVM writes besides the lake (its log, its warehouse folder): its user's alone
            cwd=home,
            env={**os.environ, "SPARK_LOCAL_IP": HOST, TOKEN_VARIABLE: secret},
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    port = None
    while port is None or not _answers(port):
        port = port or _bound_port(spark_log, logged)
        if process.poll() is not None or time.monotonic() > deadline:
            _stop_group(process.pid)
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise EngineError(
                f"the warm Spark engine did not start ({'it exited' if process.poll() is not None else 'no answer'} "
                f"after {START_TIMEOUT_S} s at most); {log} ends with:\n" + "\n".join(tail)
            )
        time.sleep(0.2)
    started = Running(process.pid, port, wanted.digest, recorded(wanted))
    write_private(home / STATE_FILE, json.dumps(asdict(started), indent=2))
    return started


# Added to the server's logging configuration: the line naming the port it listens on.
_STARTED_LOGGED = """
logger.connectserver.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connectserver.level = info
"""


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
        if not (home / TOKEN_FILE).is_file():
            raise EngineError(
                f"the warm Spark engine in {home} runs without a token (started by an earlier version: any user of "
                "the machine can use it): stop it with `python -m exact_backfills engine stop`"
            )
        if found.digest != wanted.digest:
            asked = json.loads(json.dumps(recorded(wanted)))  # as the running engine's were stored
            differ = {k: (found.settings.get(k), v) for k, v in asked.items() if found.settings.get(k) != v}
            if "conf" in differ:  # name the settings that differ, their values hidden (digests)
                before, after = differ.pop("conf")
                ran: dict = dict(map(tuple, before or []))
                asks: dict = dict(map(tuple, after or []))
                keys = sorted(k for k in {*ran, *asks} if ran.get(k) != asks.get(k))
                differ["conf"] = (", ".join(keys), "other values of them (not shown)")
            details = "; ".join(
                f"{k}: it runs with {_shown(was)}, this process asks for {_shown(now)}"
                for k, (was, now) in differ.items()
            )
            raise EngineError(
                f"the warm Spark engine in {home} runs with other settings ({details}): stop it with "
                "`python -m exact_backfills engine stop` (its runs end with it), or set SPARK_ENGINE=in-process"
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
        (home / TOKEN_FILE).unlink(missing_ok=True)
        return found
