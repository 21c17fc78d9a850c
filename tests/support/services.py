"""The project's services, as a test starts them: by their scripts (scripts/*.sh start|stop|status)."""

import os
import socket
import subprocess
from contextlib import contextmanager
from pathlib import Path

from resources.lake import REPO_ROOT


def script(name: str, *args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / name), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=check,
        env={**os.environ, **(env or {})},
    )


def start(name: str) -> bool:
    """Start a service by its script unless it runs already: whether this call started it."""
    started = script(name, "status", check=False).returncode != 0
    if started:
        done = script(name, "start", check=False)
        assert done.returncode == 0, f"{name} start failed:\n{done.stdout}\n{done.stderr}"
    return started


@contextmanager
def service(name: str):
    """The service up for the block; stopped afterwards only if the block started it."""
    started = start(name)
    try:
        yield
    finally:
        if started:
            script(name, "stop", check=False)


def env_file(path: Path) -> dict[str, str]:
    """The variables a service's `export NAME=value` file sets."""
    found = {}
    for line in path.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            name, value = line[len("export ") :].split("=", 1)
            found[name] = value
    return found


@contextmanager
def object_store(home: Path):
    """An S3 server of the test's own (scripts/object-store.sh), its folder `home` and a free port: the variables its
    env file sets. Each test module has its own, so that one stopping it never pulls it from under another."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"OBJECT_STORE_HOME": str(home), "OBJECT_STORE_PORT": str(port)}
    done = script("object-store.sh", "start", check=False, env=env)
    assert done.returncode == 0, f"object-store.sh start failed:\n{done.stdout}\n{done.stderr}"
    try:
        yield env_file(home / "env")
    finally:
        script("object-store.sh", "stop", check=False, env=env)
