"""The Dagster UI on a Unix socket, for the production profile's authenticating proxy (scripts/ui.sh).

Why this module: `dagster-webserver` listens on a TCP port only, and a port on 127.0.0.1 answers every user of the
machine, past any proxy in front of it. A socket in a folder only its user enters answers nobody else: the proxy,
which asks for the operator's password, is the one way in. This serves the same application the `dagster-webserver`
command builds (dagster_webserver.cli), from the same instance and workspace, on a socket; the daemon runs as
`dagster-daemon run`. It relies on two of Dagster's internal names, WorkspaceProcessContext and WorkspaceFileTarget:
tests/test_cluster_profile.py serves the UI with it and queries it through the proxy, and fails if they change.

    python -m exact_backfills.ui_server SOCKET WORKSPACE_YAML
"""

import os
import socket as sockets
import sys
from pathlib import Path


def serve(socket: Path, workspace: Path) -> None:
    import uvicorn
    from dagster import DagsterInstance
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster_webserver.app import create_app_from_workspace_process_context
    from dagster_webserver.version import __version__

    os.umask(0o077)
    # Bound here, not by uvicorn, which would open the socket to every user (0666) once bound: only its user (the
    # proxy runs as it) may connect, in a folder only its user enters.
    socket.unlink(missing_ok=True)
    listening = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    listening.bind(str(socket))
    socket.chmod(0o600)
    with DagsterInstance.get() as instance:
        with WorkspaceProcessContext(
            instance,
            version=__version__,
            read_only=False,
            workspace_load_target=WorkspaceFileTarget(paths=[str(workspace)]),
        ) as context:
            app = create_app_from_workspace_process_context(context, "")
            uvicorn.run(app, fd=listening.fileno(), log_level="warning")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m exact_backfills.ui_server SOCKET WORKSPACE_YAML", file=sys.stderr)
        return 2
    serve(Path(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
