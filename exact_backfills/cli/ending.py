"""How a command's process ends: at once, once everything it relies on at exit has happened.

Python's finalization of a process that imported Dagster and PySpark and held a Spark Connect session takes about a
second after its last exit handler (0.6 s of CPU tearing down modules and objects nothing reads again): a one-day
backfill spent 1 s of its 14 there, and the tests start hundreds of commands. What the project relies on at exit
happens before finalization: the threads that are not daemons end, the exit handlers run (the Spark session
released on the server, logging's handlers flushed), stdout and stderr are flushed. So a command does that, then ends
with `os._exit`. Files are closed by the `with` blocks that wrote them, never by the collector; the test of this
module shows an exit handler's output and the exit code kept."""

import atexit
import os
import sys
import threading
from typing import NoReturn


def end(code: int) -> NoReturn:
    """Ends the process with `code`, as `sys.exit` would but without Python's finalization."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    # CPython's own exit-handler runner (private to the atexit module, there since Python 3.0): the handlers run once,
    # here, as at a normal exit. tests/test_cli.py fails if an exit handler's output goes missing.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a pipe whose reader left: nothing more reaches it either way
            pass
    os._exit(code)
