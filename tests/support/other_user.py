"""Another local user of the machine, created by the tests: what they can reach of what the project started."""

import atexit
import functools
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pytest

from resources.engine import token_parameter

OTHER_USER = "exact-backfills-other"


@functools.cache
def _home() -> Path:
    """A home for the other user in this process: a new folder (mkdtemp, never a path someone could have planted),
    then theirs."""
    home = Path(tempfile.mkdtemp(prefix="other-user-home-"))
    os.chown(home, *(int(n) for n in _ids()), follow_symlinks=False)
    return home


def _ids() -> tuple[str, str]:
    other_user()  # created first: the first call on a fresh machine may come from here
    return (
        subprocess.run(["id", "-u", OTHER_USER], capture_output=True, text=True, check=True).stdout.strip(),
        subprocess.run(["id", "-g", OTHER_USER], capture_output=True, text=True, check=True).stdout.strip(),
    )


def other_user() -> str:
    """The other user, created (once): a second account on a shared machine."""
    if os.geteuid() != 0:
        pytest.skip("creating a second local user needs root")
    if subprocess.run(["id", "-u", OTHER_USER], capture_output=True).returncode != 0:
        subprocess.run(
            ["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/sh", OTHER_USER],
            check=True,
            capture_output=True,
        )
    return OTHER_USER


# The other user's Python: the system's, of the same version as the project's, with the project's packages (public)
# on its path. The project's interpreter itself may live where only its user enters (a pyenv in root's home).
SYSTEM_PYTHON = "/usr/bin/python3"


@functools.cache
def other_python() -> str:
    found = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True
    )
    if found.stdout.split() != [str(n) for n in sys.version_info[:2]]:
        pytest.fail(f"the tests run another user's client with {SYSTEM_PYTHON}, which must be Python {sys.version[:4]}")
    return SYSTEM_PYTHON


@functools.cache
def _packages() -> str:
    """The project's packages, where the other user can read them. A clone may live in a folder only its user enters
    (`mktemp -d`); then its packages are linked (hard links, or copies across file systems) into a new folder open to
    all, removed when this process ends. What the tests probe in the clone itself stays where it is."""
    installed = sysconfig.get_paths()["purelib"]
    reach = as_other_with("/usr/bin/test", "-r", str(Path(installed, "pyspark", "__init__.py")), packages="")
    if reach.returncode == 0:
        return installed
    shared = Path(tempfile.mkdtemp(prefix="other-user-packages-"))
    atexit.register(shutil.rmtree, shared, ignore_errors=True)
    shared.chmod(0o755)
    linked = subprocess.run(["cp", "-al", installed, str(shared / "site-packages")], capture_output=True, text=True)
    if linked.returncode != 0:
        shutil.rmtree(shared / "site-packages", ignore_errors=True)
        subprocess.run(["cp", "-a", installed, str(shared / "site-packages")], check=True, capture_output=True)
    return str(shared / "site-packages")


def as_other(*command: str, stdin: str = "", timeout: float = 180) -> subprocess.CompletedProcess:
    """`command` run as the other user, with an environment of their own (nothing of this process's but the path to
    the project's packages)."""
    return as_other_with(*command, stdin=stdin, timeout=timeout, packages=_packages())


def as_other_with(*command: str, packages: str, stdin: str = "", timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        _as_other_command(command, packages), input=stdin, capture_output=True, text=True, timeout=timeout, cwd=_home()
    )


def _as_other_command(command: tuple[str, ...], packages: str) -> list[str]:
    environment = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(_home()),
        "LANG": "C.UTF-8",
        "PYTHONPATH": packages,
    }
    return ["runuser", "-u", other_user(), "--", "env", "-i", *(f"{k}={v}" for k, v in environment.items()), *command]


def python_started_as_other(code: str) -> subprocess.Popen:
    """Python code started as the other user, with the project's packages, its standard error a pipe of text: to be
    read while it runs, and stopped with `os.killpg` (a session of its own)."""
    return subprocess.Popen(
        _as_other_command((other_python(), "-c", code), _packages()),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=_home(),
        start_new_session=True,
    )


def python_as_other(code: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """Python code run by the other user, with the project's packages."""
    return as_other(other_python(), "-c", code, timeout=timeout)


# A Spark Connect client, given its URL on standard input (a token is on no command line): `42` on its output if the
# server ran its query.
CONNECT_QUERY = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.stdin.read().strip()).getOrCreate()
print(spark.sql("SELECT 42 AS answer").collect()[0].answer)
"""
# What the Connect server answers a client without its token (or with another).
UNAUTHENTICATED = "UNAUTHENTICATED"


def assert_only_its_token_runs_a_query(port: int | str, token: str) -> None:
    """The Connect server on `port` runs the operator's query, given `token`, and no query of the other user's: without
    a token, or with another."""
    mine = connect_query(f"sc://localhost:{port}/;{token_parameter(token)}", user="operator")
    assert mine.stdout.strip().splitlines()[-1:] == ["42"], mine.stderr[-2000:]
    guessed = (f"sc://localhost:{port}/;token=guessed", f"sc://localhost:{port}/;{token_parameter('guessed')}")
    for url in (f"sc://127.0.0.1:{port}", f"sc://localhost:{port}", *guessed):
        theirs = connect_query(url)
        assert theirs.returncode != 0 and "42" not in theirs.stdout.split(), (url, theirs.stdout, theirs.stderr[-800:])
        assert UNAUTHENTICATED in theirs.stderr, theirs.stderr[-800:]  # refused for want of the token, nothing else


def connect_query(url: str, user: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """CONNECT_QUERY against `url`, as the other user, or as this process's user with `user="operator"`."""
    if user == "operator":
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
        command = [sys.executable, "-c", CONNECT_QUERY]
        return subprocess.run(command, input=url, capture_output=True, text=True, timeout=timeout, env=env)
    return as_other(other_python(), "-c", CONNECT_QUERY, stdin=url, timeout=timeout)


# Every path given on standard input that the other user can open: a file read, a folder listed.
_READABLE = """
import os, sys
for path in sys.stdin.read().split("\\0"):
    if not path:
        continue
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").close()
        print(path)
    except OSError:
        pass
"""


def readable_by_other(paths: Iterable[Path]) -> list[str]:
    """The paths the other user can read. A file left readable on purpose is checked with them: were the probe
    unable to read anything, it would say so rather than report nothing."""
    control = Path(tempfile.mkdtemp(prefix="readable-control-"))
    try:
        control.chmod(0o755)
        (control / "open").write_text("anyone may read this")
        (control / "open").chmod(0o644)
        done = as_other(other_python(), "-c", _READABLE, stdin="\0".join(map(str, [control / "open", *paths])))
    finally:
        (control / "open").unlink()
        control.rmdir()
    assert done.returncode == 0, done.stderr
    found = done.stdout.splitlines()
    assert found[:1] == [str(control / "open")], "the probe could not read a file open to all"
    return found[1:]


def everything_under(*roots: Path) -> list[Path]:
    """Every file and folder under the roots, the roots included (not following links)."""
    found: list[Path] = []
    for root in roots:
        if not root.exists():
            continue
        found.append(root)
        for folder, folders, files in os.walk(root):
            found += [Path(folder, name) for name in (*folders, *files)]
    return found


def open_to_others(paths: Iterable[Path]) -> list[str]:
    """The paths whose permissions let a user other than their owner read or write them, or enter them (a folder). A
    file only executable by others is not: without reading it they can do nothing with it (Spark marks the jars a
    worker fetches executable by all)."""
    shown = []
    for path in paths:
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue  # gone since it was listed (a temporary file)
        if stat.S_ISLNK(mode):
            continue
        if mode & (0o077 if stat.S_ISDIR(mode) else 0o066):
            shown.append(f"{stat.filemode(mode)} {path}")
    return shown


def command_lines_seen_by_other() -> str:
    """Every process's command line and environment, as far as the other user can read them."""
    done = python_as_other(
        "import glob\n"
        "for p in glob.glob('/proc/[0-9]*'):\n"
        "    for part in ('cmdline', 'environ'):\n"
        "        try:\n"
        "            print(open(p + '/' + part, 'rb').read().replace(b'\\0', b' ').decode(errors='replace'))\n"
        "        except OSError:\n"
        "            pass\n"
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
