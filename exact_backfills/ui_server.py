"""The Dagster UI served by the project: on a Unix socket for the production profile's authenticating proxy
(scripts/ui.sh), or on 127.0.0.1 with its daemon for the embedded demo (scripts/demo.sh), answering its own pages only.

Why this module: `dagster-webserver` listens on a TCP port only, and a port on 127.0.0.1 answers every user of the
machine, past any proxy in front of it. A socket in a folder only its user enters answers nobody else: the proxy,
which asks for the operator's password, is the one way in. And `dagster dev`'s webserver runs what any page sends it
(exact_backfills/ui_guard.py): the embedded UI is the same application behind a middleware that refuses another
origin's requests. Both serve the application the `dagster-webserver` command builds (dagster_webserver.cli), from
the same instance and workspace; the daemon runs as `dagster-daemon run` does (exact_backfills/daemon.py). It relies
on two of Dagster's internal names, WorkspaceProcessContext and WorkspaceFileTarget: tests/test_cluster_profile.py
serves the UI with it and queries it through the proxy, tests/test_ui.py drives the embedded one in Chromium, and both
fail if they change.

    python -m exact_backfills.ui_server SOCKET WORKSPACE_YAML                # the production profile's
    python -m exact_backfills.ui_server --listen HOST:PORT WORKSPACE_YAML    # the embedded demo's, with its daemon
"""

import os
import shutil
import socket as sockets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exact_backfills.ui_guard import Credentials, Guarded, own_origins

# The address of its own a browser may reach the embedded UI at, beside http://HOST:PORT (a name of this machine).
ORIGIN_VARIABLE = "DAGSTER_UI_ORIGIN"
# The embedded UI's user and password, in the instance's folder (its user's alone), made at its first start.
CREDENTIALS_FILE = "ui-credentials"


def credentials_file() -> Path:
    return Path(os.environ.get("DAGSTER_HOME", ".")) / CREDENTIALS_FILE


@contextmanager
def _application(workspace: Path) -> Iterator[Any]:
    from dagster import DagsterInstance
    from dagster_webserver.app import create_app_from_workspace_process_context
    from dagster_webserver.version import __version__

    from exact_backfills.dagster_private import WorkspaceFileTarget, WorkspaceProcessContext

    with DagsterInstance.get() as instance:
        with WorkspaceProcessContext(
            instance,
            version=__version__,
            read_only=False,
            workspace_load_target=WorkspaceFileTarget(paths=[str(workspace)]),
            code_server_log_level="WARNING",
        ) as context:
            yield create_app_from_workspace_process_context(context, "")


def serve(socket: Path, workspace: Path) -> None:
    import uvicorn

    os.umask(0o077)
    # Bound here, not by uvicorn, which would open the socket to every user (0666) once bound: only its user (the
    # proxy runs as it) may connect, in a folder only its user enters.
    socket.unlink(missing_ok=True)
    listening = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    listening.bind(str(socket))
    socket.chmod(0o600)
    with _application(workspace) as app:
        uvicorn.run(app, fd=listening.fileno(), log_level="warning")


def serve_local(host: str, port: int, workspace: Path) -> None:
    """The embedded UI on host:port, answering its user (its password) from its own pages only, and its daemon once
    the UI answers (both would otherwise create a new instance's tables at once). The daemon is in this process's
    group: stopping the group (Ctrl-C on the terminal, or a kill of the group) stops both; the daemon is stopped when
    the UI stops."""
    import uvicorn

    origins = own_origins([f"{host}:{port}", f"localhost:{port}"], [os.environ.get(ORIGIN_VARIABLE, "")])
    os.umask(0o077)
    credentials, made = Credentials.kept_in(credentials_file())
    if made:  # shown once, on a terminal only: an output sent elsewhere is a log, and a log holds no secret
        said = f"password {credentials.password}" if sys.stdout.isatty() else "a new password (not shown: no terminal)"
        print(f"The UI's user {credentials.user}, {said}", flush=True)
        print(f"  (kept in {credentials_file()}, readable by you alone)", flush=True)
    print(f"The UI: http://{host}:{port} (user and password in {credentials_file()})", flush=True)
    daemon: list[subprocess.Popen] = []
    with code_servers(workspace) as served, _application(served) as app:
        config = uvicorn.Config(Guarded(app, origins, credentials), host=host, port=port, log_level="warning")
        server = uvicorn.Server(config)
        threading.Thread(target=_start_daemon, args=(server, served, daemon), daemon=True).start()
        try:
            server.run()
        finally:
            _stop(daemon)


@contextmanager
def code_servers(workspace: Path, timeout: float = 600) -> Iterator[Path]:
    """A code server (`dagster code-server start`) per code location of `workspace` that names its code, and a
    workspace naming their sockets, which the webserver and the daemon share, as `dagster dev` shares its own. Given
    the code itself, each would start code servers of its own, and the daemon a new one at its workspace's reload every
    60 s: the project imported and its definitions loaded again each minute, seconds of CPU. A code server loads them
    once, and again when the UI's Reload asks it. Its socket is in a folder only its user enters."""
    import yaml

    folder = Path(tempfile.mkdtemp(prefix="exact-backfills-code-"))
    started: list[CodeServer] = []
    try:
        entries = []
        for n, entry in enumerate(yaml.safe_load(workspace.read_text())["load_from"]):
            server = CodeServer.of(entry, workspace.parent, folder / f"location-{n}.sock")
            if server is None:  # a code server already (grpc_server): as it is
                entries.append(entry)
                continue
            started.append(server.start())
            entries.append({"grpc_server": {"socket": str(server.socket), "location_name": server.location}})
        deadline = time.monotonic() + timeout
        for server in started:
            server.wait_until_up(deadline)
        served = folder / "workspace.yaml"
        served.write_text(yaml.safe_dump({"load_from": entries}))
        yield served
    finally:
        _stop([s.process for s in started if s.process is not None])
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class CodeServer:
    """A code location's code server: `dagster code-server start` on a socket, serving the code a workspace names."""

    location: str
    target: list[str]  # the code: -m MODULE or -f FILE, -d WORKING_DIRECTORY, -a ATTRIBUTE
    socket: Path
    process: subprocess.Popen | None = None

    @classmethod
    def of(cls, entry: dict[str, Any], base: Path, socket: Path) -> "CodeServer | None":
        """The code server of a workspace's `load_from` entry (`python_module` or `python_file`), relative paths from
        `base`; None for an entry that is a code server already."""
        (kind, spec), *others = entry.items()
        if kind == "grpc_server" and not others:
            return None
        if kind not in ("python_module", "python_file") or others:
            raise ValueError(f"the workspace's entry {entry} is not a python_module, python_file or grpc_server")
        spec = spec if isinstance(spec, dict) else {"module_name" if kind == "python_module" else "relative_path": spec}
        code = spec.get("module_name") or str(base / spec["relative_path"])
        target = ["-m" if kind == "python_module" else "-f", code]
        target += ["-d", str(base / spec.get("working_directory", "."))]
        target += ["-a", spec["attribute"]] if "attribute" in spec else []
        location = spec.get("location_name") or code
        return cls(location, target, socket)

    def start(self) -> "CodeServer":
        command = [sys.executable, "-m", "dagster", "code-server", "start", "--socket", str(self.socket)]
        command += [*self.target, "--location-name", self.location, "--use-python-environment-entry-point"]
        self.process = subprocess.Popen([*command, "--log-level", "warning"])
        return self

    def wait_until_up(self, deadline: float) -> None:
        """Until it answers: it binds its socket once the code is loaded (or failed to load, which the UI shows)."""
        while not self.socket.exists():
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the code server of {self.location} exited ({self.process.returncode})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the code server of {self.location} did not start")
            time.sleep(0.2)


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _start_daemon(server: Any, workspace: Path, started: list[subprocess.Popen]) -> None:
    while not server.started:
        if server.should_exit:
            return
        time.sleep(0.2)
    # `dagster-daemon run`, on the project's clock (exact_backfills/daemon.py).
    daemon = [sys.executable, "-m", "exact_backfills.daemon", "run", "-w", str(workspace), "--log-level", "warning"]
    started.append(subprocess.Popen(daemon))


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--listen" and ":" in argv[1]:
        host, port = argv[1].rsplit(":", 1)
        serve_local(host, int(port), Path(argv[2]))
        return 0
    if len(argv) != 2:
        print(
            "usage: python -m exact_backfills.ui_server SOCKET WORKSPACE_YAML, or --listen HOST:PORT WORKSPACE_YAML",
            file=sys.stderr,
        )
        return 2
    serve(Path(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
