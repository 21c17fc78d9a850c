"""The embedded UI's code servers (exact_backfills/ui_server.py): one per code location a workspace names, shared by
the webserver and the daemon; a location that is a code server already stays as it is. tests/test_ui.py and
tests/test_ml_stretch.py serve the UI and its daemon from them."""

from pathlib import Path

import pytest

from exact_backfills.ui_server import CodeServer

BASE, SOCKET = Path("/repo"), Path("/private/location-0.sock")


@pytest.mark.parametrize(
    ("entry", "location", "target"),
    [
        (  # the project's workspace.yaml
            {
                "python_module": {
                    "module_name": "exact_backfills.definitions",
                    "working_directory": ".",
                    "location_name": "exact_backfills",
                }
            },
            "exact_backfills",
            ["-m", "exact_backfills.definitions", "-d", "/repo"],
        ),
        (
            {"python_module": "my_pipeline.definitions"},
            "my_pipeline.definitions",
            ["-m", "my_pipeline.definitions", "-d", "/repo"],
        ),
        (
            {"python_file": {"relative_path": "defs.py", "attribute": "defs", "location_name": "mine"}},
            "mine",
            ["-f", "/repo/defs.py", "-d", "/repo", "-a", "defs"],
        ),
    ],
)
def test_a_location_naming_its_code_gets_a_code_server_of_that_code_on_a_socket(entry, location, target):
    server = CodeServer.of(entry, BASE, SOCKET)
    assert server is not None
    assert (server.location, server.target, server.socket) == (location, target, SOCKET)


def test_a_location_that_is_a_code_server_already_is_served_as_it_is():
    assert CodeServer.of({"grpc_server": {"host": "localhost", "port": 4266}}, BASE, SOCKET) is None


def test_a_location_of_another_kind_is_refused_in_one_line():
    with pytest.raises(ValueError, match="is not a python_module, python_file or grpc_server"):
        CodeServer.of({"python_package": "mine"}, BASE, SOCKET)
